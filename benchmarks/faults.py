#!/usr/bin/env python
"""Fault injection: every fault of the reliability issue, applied one by one to a real store and real runs.

    .venv/bin/python benchmarks/faults.py --out results/amd-epyc-avx512/bench/faults.txt

A thin entry point: the fault catalogue, the subprocess harness, the scenarios and the runner live in the package
``graftbench.faults`` (the tests import the same catalogue and scenarios); see :mod:`graftbench.faults.runner`.
"""

from __future__ import annotations

import sys

from graftbench.faults.runner import main

if __name__ == "__main__":
    sys.exit(main())
