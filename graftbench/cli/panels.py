"""Which help panel each command-line option is shown in: the options grouped by what they are for (the model and
its engine, the problems, decoding, graft and store, output, ...), one table for every command.

:func:`place_options` sets each option's ``rich_help_panel`` from :data:`PANELS` (by its long name) or, where one
command gives a name another meaning, from :data:`COMMAND_PANELS`; the app calls it once every command is
registered. An option in neither table stays in typer's default panel, and tests/cli/test_help.py fails naming it.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Iterator

import typer
from typer.models import OptionInfo

MODEL = "Model and engine"
PROBLEMS = "Problems"
DECODING = "Decoding"
GRAFT = "Graft and store"
OUTPUT = "Output"
RAY = "Ray workers"
CHECKS = "What is checked"
LLAMA = "llama.cpp engine"
MEASURED = "What is measured"
SECTIONS = "Sections"
BATCHED = "Batched samples"
EXTRA_ROWS = "Rows in fresh processes"
STATISTICS = "Statistics"

_GROUPS = {
    MODEL: "--model --engine --dtype --dtypes --chunk-size --isa --device --kernels "
           "--threads",
    LLAMA: "--kv-type --kv-types --flash-attn",
    PROBLEMS: "--problems --limit --shard --id-field --problem-field --answer-field --solution-field --per-family "
              "--library-per-family --held-out-per-family",
    DECODING: "--max-new-tokens --token-budget --samples --temperature --top-p --seed --mode",
    GRAFT: "--graft --store --new-store --certify --strict --assume-kind --min-similarity --layout --graft-from "
           "--example-as --from-run --from-manifest --references --recompute --rounds",
    OUTPUT: "--runs-dir --run --out --name --format --write-expect --log --prefix --markdown",
    RAY: "--executor --workers --worker-threads --address --problem-timeout",
    CHECKS: "--require-artifacts --allow-unanchored --allow-unchecked-payloads --rescore --controls --control-pairs "
            "--expect --pairs --pair --across-cpu-kinds --extend",
    MEASURED: "--sizes --repeats --graft-repeats --decode-tokens --store-sizes --prompt-tokens --prefill-tokens "
              "--torch-sizes --no-torch --widths --tokens --artifact-tokens --probes",
    SECTIONS: "--only --smoke",
    BATCHED: "--batch-samples --batch-tokens --batch-artifact-tokens",
    EXTRA_ROWS: "--cold-load --memory-probes --peer-python",
    STATISTICS: "--resamples --families",
}
# Each option's panel by its long name, for every command that does not say otherwise below.
PANELS = {option: panel for panel, options in _GROUPS.items() for option in options.split()}
# Where a command gives an option's name another meaning: command -> option -> panel.
COMMAND_PANELS = {
    "check-exact": {"--samples": CHECKS, "--limit": CHECKS},
    "report": {"--seed": STATISTICS, "--rounds": STATISTICS},
    "route-quality": {"--seed": STATISTICS},
    "verify-manifest": {"--store": CHECKS, "--problems": CHECKS},
}


def commands(app: typer.Typer, prefix: str = "") -> Iterator[tuple[str, object]]:
    """Every command of ``app`` and of its sub-apps, as ``("store ls", callback)``."""
    for info in app.registered_commands:
        yield prefix + (info.name or info.callback.__name__.replace("_", "-")), info.callback
    for group in app.registered_groups:
        yield from commands(group.typer_instance, f"{prefix}{group.name} ")


def options(callback) -> Iterator[tuple[str, OptionInfo]]:
    """A command's options as ``(long name, OptionInfo)``, in its signature's order (``--x/--no-x`` as ``--x``): an
    option given as a parameter's default, or in its ``Annotated`` type (:mod:`graftbench.cli.options`)."""
    hints = typing.get_type_hints(callback, include_extras=True)
    for parameter in inspect.signature(callback).parameters.values():
        annotated = [m for m in getattr(hints.get(parameter.name), "__metadata__", ()) if isinstance(m, OptionInfo)]
        info = annotated[0] if annotated else parameter.default
        if isinstance(info, OptionInfo):
            declared = [d for d in declarations(info) if d.startswith("--")]
            name = declared[0] if declared else "--" + parameter.name.replace("_", "-")
            yield name.split("/")[0], info


def declarations(info: OptionInfo) -> tuple[str, ...]:
    """An option's names as declared (``("--model", "-m")``): in ``Annotated`` style typer takes the first
    positional argument of ``typer.Option`` for a name, not a default."""
    first = (info.default,) if isinstance(info.default, str) and info.default.startswith("-") else ()
    return (*first, *(info.param_decls or ()))


def panel_of(command: str, option: str) -> str | None:
    """The help panel of ``option`` in ``command``; ``None`` when neither table places it."""
    return COMMAND_PANELS.get(command, {}).get(option) or PANELS.get(option)


def place_options(app: typer.Typer) -> None:
    """Set the help panel of every option of every command of ``app`` (an option object that several commands share
    gets its panel once; tests/cli/test_help.py checks that no two commands place it differently)."""
    for command, callback in commands(app):
        for option, info in options(callback):
            panel = panel_of(command, option)
            if panel is not None and info.rich_help_panel is None:
                info.rich_help_panel = panel
