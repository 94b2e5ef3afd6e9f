"""``graftbench bench``: the graft against the alternatives, measured side by side in one run.

Each module measures one thing and returns plain dicts of figures (seconds, bytes, tokens, GB/s, each timing as
median, min and max over repetitions); :mod:`.run` strings them together and :mod:`.report` writes the JSON,
markdown table and PNG plots.
"""
