"""graftbench: deposit verified solutions as byte-exact KV-cache artifacts and graft them back.

Importing the package sets how this process allocates memory, before torch allocates any (both settings change
where tensors live, never what they hold; the exactness replay in tests/test_exactness.py checks logits hashes
recorded without them):

- PyTorch's CPU allocator gives tensors of 2 MiB and more 2 MiB-aligned, transparent-huge-page memory
  (``THP_MEM_ALLOC_ENABLE``, read once when torch first allocates). A restore reads an artifact into new tensors,
  and with 4 KiB pages most of that read went to page faults: 69 ms against 21 ms for 189 MB here.
- glibc malloc keeps freed blocks of up to 32 MiB for reuse instead of returning them to the kernel
  (``mallopt(M_MMAP_THRESHOLD, 32 MiB)``, ``mallopt(M_TRIM_THRESHOLD, 1 GiB)``): a graft frees the previous
  cache and allocates the next one, and fresh pages must be faulted in and zeroed by the kernel. Measured here on
  a 378 MB artifact: 110 ms per graft (read at page-cache speed) against 160-470 ms. The cost is that a
  process's resident memory does not shrink after a large graft until it exits.
"""

import os

from .util.allocator import keep_freed_memory

os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
keep_freed_memory()

# The instruction-set pin (graftbench/util/isa.py) must reach the environment before torch is imported.
if os.environ.get("GRAFTBENCH_ISA"):
    from .util.isa import apply as _apply_isa

    _apply_isa(os.environ["GRAFTBENCH_ISA"])
