"""`SecureFedNesterov`, the Flower strategy of the federation: weighted FedAvg by scrubbed-data size
then server-side Nesterov momentum (aggregate.py, eqs. 3-5) over the organizations' secure
adapters. Numpy and Flower only (the server needs no torch for this).

Per round: wait (at most `node_wait` s) for `min_nodes` connected nodes and send each the global
adapter and the training config; of the replies, an error reply (a node that died, a ClientApp
that failed) and a malformed one (any record besides `arrays` and `metrics`, names or shapes
other than the global adapter's, non-finite values, a bad sample count) are each logged with the
node and the reason, and left out; the rest are aggregated. With none left the round fails with
a message and the global adapter stays as it was; the run goes on with the next round."""

from __future__ import annotations

import time
from logging import INFO, WARNING
from pathlib import Path

from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp.strategy import Strategy
from flwr.supercore import log

from umbra.federation.aggregate import (AggregationError, ServerOptConfig, ServerState, aggregate_round,
                                        validate_update)
from umbra.federation.record import append_json, save_arrays

ARRAYS, METRICS, CONFIG = "arrays", "metrics", "config"  # the only records of a train message / reply
SAMPLES = "num-examples"  # the reply's |D_n^mask| (scrubbed tokens trained on)


def to_record(arrays) -> ArrayRecord:
    return ArrayRecord({k: Array(v) for k, v in arrays.items()})


def read_update(msg: Message, spec) -> tuple[dict, int]:
    """(arrays, samples) of a train reply, or AggregationError saying what is wrong with it."""
    who = f"node {msg.metadata.src_node_id}"
    content = msg.content
    keys = set(content.keys())
    if keys != {ARRAYS, METRICS}:
        raise AggregationError(f"{who}: a reply must hold exactly the records {ARRAYS!r} and {METRICS!r}, "
                               f"got {sorted(keys)}")
    record, metrics = content[ARRAYS], content[METRICS]
    if not isinstance(record, ArrayRecord) or not isinstance(metrics, MetricRecord):
        raise AggregationError(f"{who}: {ARRAYS!r} must be an ArrayRecord and {METRICS!r} a MetricRecord")
    if set(metrics.keys()) != {SAMPLES}:
        raise AggregationError(f"{who}: the metrics must hold only {SAMPLES!r}, got {sorted(metrics.keys())}")
    try:
        arrays = {name: a.numpy() for name, a in record.items()}
    except Exception as exc:  # noqa: BLE001 - any undecodable array is a malformed update
        raise AggregationError(f"{who}: an array cannot be decoded ({type(exc).__name__})") from None
    samples = metrics[SAMPLES]
    validate_update(arrays, samples, spec, who)
    return arrays, int(samples)


class SecureFedNesterov(Strategy):
    def __init__(self, initial: dict, opt: ServerOptConfig, min_nodes: int = 2, node_wait: float = 300.0,
                 record_dir: Path | None = None):
        if min_nodes < 1 or not node_wait > 0:
            raise AggregationError("min_nodes must be >= 1 and node_wait > 0")
        self.opt = opt.validate()
        self.state = ServerState.initial(initial)
        self.min_nodes, self.node_wait = min_nodes, node_wait
        self.record_dir = Path(record_dir) if record_dir else None
        self.failed_rounds: list[int] = []
        if self.record_dir:
            save_arrays(self.record_dir / "round-0" / "global.npz", self.state.weights)

    def summary(self) -> None:
        log(INFO, "SecureFedNesterov: weighted FedAvg by scrubbed tokens + server Nesterov (m=%s, eta=%s), "
            "min %d nodes, %d secure-adapter tensors", self.opt.momentum, self.opt.lr, self.min_nodes,
            len(self.state.weights))

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid) -> list[Message]:
        deadline = time.monotonic() + self.node_wait
        while len(nodes := sorted(grid.get_node_ids())) < self.min_nodes and time.monotonic() < deadline:
            time.sleep(0.5)
        if len(nodes) < self.min_nodes:
            log(WARNING, "round %d: only %d of the %d organizations needed are connected after %.0f s; "
                "round skipped, global adapter kept", server_round, len(nodes), self.min_nodes, self.node_wait)
            return []
        config = ConfigRecord({**dict(config.items()), "server-round": server_round})
        record = RecordDict({ARRAYS: to_record(self.state.weights), CONFIG: config})
        log(INFO, "round %d: training on %d organizations", server_round, len(nodes))
        return [Message(content=record, message_type=MessageType.TRAIN, dst_node_id=n) for n in nodes]

    def aggregate_train(self, server_round: int, replies) -> tuple[ArrayRecord | None, MetricRecord | None]:
        spec, accepted, rejected = self.state.spec(), [], {}
        for msg in replies:
            node = int(msg.metadata.src_node_id)
            if msg.has_error():
                rejected[node] = f"error reply: {msg.error.reason}"
                continue
            try:
                arrays, samples = read_update(msg, spec)
            except AggregationError as exc:
                rejected[node] = str(exc)
                continue
            accepted.append((node, arrays, samples))
        for node, why in sorted(rejected.items()):
            log(WARNING, "round %d: update of node %d left out: %s", server_round, node, why)
        record = {"round": server_round, "accepted": [n for n, _, _ in accepted],
                  "samples": [s for _, _, s in accepted], "rejected": {str(k): v for k, v in rejected.items()}}
        try:
            new = aggregate_round(self.state, [(a, s) for _, a, s in accepted], self.opt,
                                  [f"node {n}" for n, _, _ in accepted])
        except AggregationError as exc:
            log(WARNING, "round %d failed: %s; global adapter kept (round %d's)", server_round, exc, self.state.round)
            self.failed_rounds.append(server_round)
            record["failed"] = str(exc)
            self._record(server_round, record, accepted, None)
            return None, None
        self.state = new
        self._record(server_round, record, accepted, new.weights)
        log(INFO, "round %d: aggregated %d organizations (%d scrubbed tokens)", server_round, len(accepted),
            sum(s for _, _, s in accepted))
        return to_record(new.weights), MetricRecord({"organizations": len(accepted),
                                                     "samples": sum(s for _, _, s in accepted)})

    def _record(self, server_round: int, record: dict, accepted, weights) -> None:
        if not self.record_dir:
            return
        folder = self.record_dir / f"round-{server_round}"
        for node, arrays, samples in accepted:
            save_arrays(folder / f"{node}.npz", arrays, samples)
        if weights is not None:
            save_arrays(folder / "global.npz", weights)
        append_json(self.record_dir / "rounds.jsonl", record)

    def broadcast_final(self, grid, timeout: float) -> int:
        """Send the final global adapter Δw^T to every connected organization (a QUERY message; a
        node keeps it where its `global-out` says, for fusion, eqs. 6-8). Returns the acks."""
        nodes = sorted(grid.get_node_ids())
        record = RecordDict({ARRAYS: to_record(self.state.weights),
                             CONFIG: ConfigRecord({"final-round": self.state.round})})
        replies = grid.send_and_receive([Message(content=record, message_type=MessageType.QUERY, dst_node_id=n)
                                         for n in nodes], timeout=timeout)
        acks = sum(1 for r in replies if not r.has_error())
        log(INFO, "final global adapter (round %d) sent to %d organizations, %d acknowledged", self.state.round,
            len(nodes), acks)
        return acks

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid) -> list:
        return []  # evaluation stays with each organization (its query set never leaves it)

    def aggregate_evaluate(self, server_round: int, replies) -> MetricRecord | None:
        return None
