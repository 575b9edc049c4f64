"""SecureFedNesterov on real Flower Messages (the replies a Grid hands the ServerApp): good replies
are aggregated by eqs. 3-5; an error reply, a wrong-shape, renamed, non-finite, extra-record or
miscounted update is left out with the node and the reason; a round with nothing left fails with
a message, returns no arrays, and the global adapter stays exactly what it was."""

from __future__ import annotations

import logging
import time

import numpy as np
import pytest

from flwr.app import Array, ArrayRecord, ConfigRecord, Error, Message, Metadata, MetricRecord, RecordDict
from umbra.federation.aggregate import AggregationError, ServerOptConfig, ServerState, aggregate_round
from umbra.federation.strategy import SecureFedNesterov, read_update

SHAPES = {"layers.4.q.a": (2, 8), "layers.4.q.b": (8, 2)}


def arrays(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {k: rng.standard_normal(s).astype(np.float32) for k, s in SHAPES.items()}


def meta(node: int) -> Metadata:
    return Metadata(run_id=1, message_id="", src_node_id=node, dst_node_id=0, reply_to_message_id="m",
                    group_id="1", created_at=time.time(), ttl=60.0, message_type="train")


def reply(node: int, arrs: dict, samples=10, metrics: dict | None = None, **extra_records) -> Message:
    content = RecordDict({"arrays": ArrayRecord({k: Array(v) for k, v in arrs.items()}),
                          "metrics": MetricRecord({"num-examples": samples, **(metrics or {})}), **extra_records})
    return Message(metadata=meta(node), content=content)


def error(node: int, reason: str) -> Message:
    return Message(metadata=meta(node), error=Error(code=0, reason=reason))


def test_good_replies_are_aggregated_by_eqs_3_to_5():
    opt = ServerOptConfig(momentum=0.5, lr=0.8)
    strategy = SecureFedNesterov(arrays(0), opt, min_nodes=2)
    got, metrics = strategy.aggregate_train(1, [reply(1, arrays(1), 30), reply(2, arrays(2), 10)])
    expected = aggregate_round(ServerState.initial(arrays(0)), [(arrays(1), 30), (arrays(2), 10)], opt)
    assert all(np.array_equal(got[k].numpy(), expected.weights[k]) for k in SHAPES)
    assert dict(metrics) == {"organizations": 2, "samples": 40}


def _bad():
    good = arrays(3)
    return {
        "wrong shape": (reply(5, {**good, "layers.4.q.b": np.zeros((8, 3), np.float32)}), "has shape (8, 3)"),
        "renamed tensor": (reply(5, {"layers.4.k.a": good["layers.4.q.a"], "layers.4.q.b": good["layers.4.q.b"]}),
                           "tensor names differ"),
        "nan": (reply(5, {**good, "layers.4.q.a": np.full((2, 8), np.nan, np.float32)}), "non-finite"),
        "extra record (a revealing adapter riding along)": (
            reply(5, good, revealing=ArrayRecord({k: Array(v) for k, v in good.items()})), "exactly the records"),
        "extra metric": (reply(5, good, metrics={"canary-hits": 3}), "must hold only 'num-examples'"),
        "negative count": (reply(5, good, samples=-4), "non-negative integer"),
        "float count": (reply(5, good, samples=2.5), "non-negative integer"),
        "config instead of metrics": (Message(metadata=meta(5), content=RecordDict({
            "arrays": ArrayRecord({k: Array(v) for k, v in good.items()}),
            "metrics": ConfigRecord({"num-examples": 3})})), "must be an ArrayRecord"),
        "error reply (a node that died)": (error(5, "node 5 is offline"), "node 5 is offline"),
    }


@pytest.mark.parametrize("case", list(_bad()))
def test_a_bad_reply_is_left_out_with_its_reason_and_the_round_goes_on(case, caplog):
    bad, reason = _bad()[case]
    opt = ServerOptConfig(momentum=0.5, lr=1.0)
    strategy = SecureFedNesterov(arrays(0), opt, min_nodes=2)
    flwr_logger = logging.getLogger("flwr")
    flwr_logger.addHandler(caplog.handler)
    try:
        got, _ = strategy.aggregate_train(1, [reply(1, arrays(1), 30), bad])
    finally:
        flwr_logger.removeHandler(caplog.handler)
    assert "update of node 5 left out" in caplog.text and reason in caplog.text
    expected = aggregate_round(ServerState.initial(arrays(0)), [(arrays(1), 30)], opt)
    assert all(np.array_equal(got[k].numpy(), expected.weights[k]) for k in SHAPES)


def test_a_round_with_only_bad_replies_fails_and_keeps_the_global_adapter(tmp_path):
    strategy = SecureFedNesterov(arrays(0), ServerOptConfig(), min_nodes=1, record_dir=tmp_path)
    strategy.aggregate_train(1, [reply(1, arrays(1), 5)])
    before = {k: v.copy() for k, v in strategy.state.weights.items()}
    bad = [reply(2, {**arrays(2), "layers.4.q.a": np.zeros((3, 8), np.float32)}), error(3, "gone")]
    assert strategy.aggregate_train(2, bad) == (None, None)
    assert strategy.failed_rounds == [2] and strategy.state.round == 1
    assert all(np.array_equal(strategy.state.weights[k], before[k]) for k in SHAPES)
    assert '"failed": "an empty round' in (tmp_path / "rounds.jsonl").read_text()
    # an empty set of replies (every node gone before it answered) is the same
    assert strategy.aggregate_train(3, []) == (None, None) and strategy.state.round == 1
    # and the next good round aggregates from the kept state
    got, _ = strategy.aggregate_train(4, [reply(1, arrays(4), 5)])
    assert strategy.state.round == 2 and got is not None


def test_read_update_returns_arrays_and_count():
    arrs, n = read_update(reply(1, arrays(1), 12), ServerState.initial(arrays(0)).spec())
    assert n == 12 and all(np.array_equal(arrs[k], arrays(1)[k]) for k in SHAPES)
    with pytest.raises(AggregationError, match="node 1: 'layers.4.q.a' has shape"):
        read_update(reply(1, {**arrays(1), "layers.4.q.a": np.zeros((2, 9), np.float32)}),
                    ServerState.initial(arrays(0)).spec())
