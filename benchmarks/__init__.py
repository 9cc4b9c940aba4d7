"""Benchmarks for subs: throughput, latency, trigger cost, history and memory,
measured beside naive implementations of the same job in one run.

Run ``python -m benchmarks --help``. This is not a test suite: nothing here
asserts on timings; goals are reported as PASS/FAIL next to the figures.
"""

from __future__ import annotations

import sys
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent
PYTHON = sys.executable
