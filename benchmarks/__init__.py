"""Product benchmarks: how fast and how well the product itself does its job — accepted lines
(line_completion.py), keystroke latency through the language server (keystroke.py), a dialled WAN
(wan.py), the cloud under load and under hostile clients (cloud_load.py, edge_soak.py), the cost of
the split and of adapters (split_overhead.py, adapter_overhead.py, ...). Each is a script with a
command in its docstring and a results table in docs/benchmarks.md.

The research grids and studies (the papers' tables, privacy attacks, federation, SecureGate,
the scrubber) live in experiments/; they may import the helpers here (doc_markers.py,
machine.py, keyring_store.py, split_overhead.py's interval), never the reverse, and product code
(umbra/, server/, lsp/, keys/) imports neither (pyproject.toml [tool.importlinter],
tests/test_architecture.py). The scripts here import each other by bare name (each puts this
folder on sys.path); experiments import them as `benchmarks.<module>`."""
