"""Fault injection, shared by ``benchmarks/faults.py`` and the tests so that both apply the same faults.

* :mod:`~graftbench.faults.catalogue`: the faults as data and small functions (forged and damaged artifacts, the
  :class:`~graftbench.faults.catalogue.Lab` that builds them, manifest edits, bad problem sets, hostile names).
* :mod:`~graftbench.faults.harness`: subprocesses to kill at named points, and a disk to fill.
* :mod:`~graftbench.faults.scenarios`: the scenarios both play (killed deposits and solves, concurrent deposits,
  full disks, edited manifests), each returning what it saw; the inventories that count what a fault lost.
* :mod:`~graftbench.faults.store_faults`: the store and run-folder faults (a damaged index and its rebuild,
  swapped artifact files, two processes resuming one run, temporary files of killed writers).
* :mod:`~graftbench.faults.runner`: every fault applied to a real store and run, the report table, and ``main``.

Importing this package imports none of them (they load torch).
"""
