"""Research grids and studies: the papers' tables on this product (NOESIS: noesis*.py; SecureGate:
securegate.py, gate_false_accepts.py, federation*.py; the privacy attack grid, the privacy-utility
table and frontier: privacy_attacks.py, privacy_utility.py, private_mode*.py, measured_modes.py,
decipher_stability.py, adapter_leakage.py; the scrubber: scrubber.py, scrub_*.py), their raw rows in
results/, their tables in the docs each names. Each script's docstring holds its command, run from
the repository root (`python experiments/noesis.py --help`).

They import the product (umbra/, keys/, ...) and the product benchmarks' helpers
(`benchmarks.doc_markers`, `benchmarks.machine`, ...); nothing outside experiments/ and
tests/experiments/ imports them (pyproject.toml [tool.importlinter], tests/test_architecture.py)."""
