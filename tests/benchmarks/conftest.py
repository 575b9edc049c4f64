"""The product benchmark scripts import each other by bare name (each puts `benchmarks/` on
sys.path when run): do the same here, so that the tests import them as the scripts do (and so also
the processes they spawn, which inherit sys.path). The experiments' tests (tests/experiments/)
import `experiments.<module>` from the repository root instead."""

import sys
from pathlib import Path

BENCHMARKS = str(Path(__file__).resolve().parents[2] / "benchmarks")
if BENCHMARKS not in sys.path:
    sys.path.insert(0, BENCHMARKS)
