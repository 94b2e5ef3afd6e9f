"""graftbench: deposit verified solutions as byte-exact KV-cache artifacts and graft them back.

Importing the package asks PyTorch's CPU allocator for 2 MiB-aligned, transparent-huge-page allocations for
tensors of 2 MiB and more (``THP_MEM_ALLOC_ENABLE``, read once when torch allocates first; it must be set before
torch is imported). A restore reads an artifact into freshly allocated tensors, and with 4 KiB pages most of that
read went to page faults: 69 ms against 21 ms for 189 MB here. Allocation alignment does not change results;
the exactness replay (tests/test_exactness.py) checks logits hashes recorded without it.
"""

import os

os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
