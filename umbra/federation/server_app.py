"""The federation's Flower ServerApp: the global secure adapter Δw^0 of the public base model, then
`rounds` rounds of SecureFedNesterov (strategy.py) over the organizations' SuperNodes; every
message received is described in `record-dir` (record.py) when set, and the final global adapter
is written to `out` (.npz of the LoRA's arrays) when set and sent to every organization (a QUERY
message: each keeps it for fusion, eqs. 6-8).

Run config (`umbra federation serve` sets it; `flwr run --run-config` overrides):
    model        the public base model directory (to shape Δw^0; the organizations use the same)
    rounds, min-nodes, node-wait (s), round-timeout (s)
    momentum, server-lr                     m and η of eqs. 4-5
    rank, lr, epochs, block-len, batch-size, fim-rate, seed    the organizations' local training
                                            (with `rounds`, which an organization under DP plans by)
    record-dir, out                         "" for none"""

from __future__ import annotations

from pathlib import Path

from flwr.app import ConfigRecord, Context
from flwr.serverapp import Grid, ServerApp
from flwr.supercore import log

from umbra.federation.aggregate import ServerOptConfig
from umbra.federation.record import RecordingGrid, save_arrays
from umbra.federation.strategy import SecureFedNesterov, to_record

app = ServerApp()
TRAIN_KEYS = ("rank", "lr", "epochs", "block-len", "batch-size", "fim-rate", "seed", "rounds")


def initial_global(model_dir: Path, run_config) -> dict:
    from umbra.engine import ClientModel
    from umbra.federation.adapter_arrays import initial_arrays
    from umbra.federation.client_app import train_config

    return initial_arrays(ClientModel.load(model_dir), train_config(run_config))


@app.main()
def main(grid: Grid, context: Context) -> None:
    run_federation(grid, context.run_config)


def run_federation(grid: Grid, rc) -> None:
    """The ServerApp's work over any Grid (a SuperLink's, the simulation engine's) for run config `rc`."""
    record_dir = Path(str(rc["record-dir"])) if str(rc.get("record-dir", "")) else None
    strategy = SecureFedNesterov(initial_global(Path(str(rc["model"])), rc),
                                 ServerOptConfig(momentum=float(rc["momentum"]), lr=float(rc["server-lr"])),
                                 min_nodes=int(rc["min-nodes"]), node_wait=float(rc["node-wait"]),
                                 record_dir=record_dir)
    if record_dir:
        grid = RecordingGrid(grid, record_dir)
    train = ConfigRecord({k: rc[k] for k in TRAIN_KEYS})
    strategy.start(grid=grid, initial_arrays=to_record(strategy.state.weights), num_rounds=int(rc["rounds"]),
                   timeout=float(rc["round-timeout"]), train_config=train)
    strategy.broadcast_final(grid, timeout=float(rc["round-timeout"]))
    out = str(rc.get("out", ""))
    if out:
        save_arrays(Path(out), strategy.state.weights)
    log(20, "federation finished: %d rounds aggregated, failed rounds %s", strategy.state.round,
        strategy.failed_rounds or "none")
