"""The benchmark scripts are not a package: make `benchmarks/` importable (and so also for the
processes they spawn, which inherit sys.path)."""

import sys
from pathlib import Path

BENCHMARKS = str(Path(__file__).resolve().parents[2] / "benchmarks")
if BENCHMARKS not in sys.path:
    sys.path.insert(0, BENCHMARKS)
