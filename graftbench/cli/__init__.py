"""The command line: parsing and printing only.

Importing it (as the ``graftbench`` script and ``python -m graftbench.cli.app`` do, before anything imports torch)
sets this process's allocator for repeated grafts (:func:`graftbench.util.allocator.set_allocator_for_grafts`);
importing ``graftbench`` alone does not."""

from ..util.allocator import set_allocator_for_grafts

set_allocator_for_grafts()
