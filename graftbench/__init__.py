"""graftbench: deposit verified solutions as byte-exact KV-cache artifacts and graft them back.

Importing the package leaves the importing process's allocator as it was: the command line sets it for repeated
grafts when it starts (:func:`graftbench.util.allocator.set_allocator_for_grafts`, which a library user may call
before importing torch). The Python API is :mod:`graftbench.api`.
"""

import os

# The instruction-set pin (graftbench/util/isa.py), asked for by the environment, must reach the environment before
# torch is imported.
if os.environ.get("GRAFTBENCH_ISA"):
    from .util.isa import apply as _apply_isa

    _apply_isa(os.environ["GRAFTBENCH_ISA"])
