"""Federated secure adapters on Flower (seed 003 §4.2; docs/securegate.md, "Federation").

Modules: aggregate (eqs. 3-5 as pure functions: weighted FedAvg + server-side Nesterov momentum),
adapter_arrays (a secure LoRA adapter <-> named numpy arrays, the only thing that travels),
org_training (one organization's round: its scrubbed view, the global adapter as the start),
strategy (the Flower strategy that calls aggregate), server_app and client_app (the Flower apps),
record (what the ServerApp received, described for audit), deploy (SuperLink / SuperNode /
`flwr run` command lines for `umbra federation`).
Importing this package imports neither torch nor flwr."""
