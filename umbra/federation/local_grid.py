"""Flower's `Grid` over organizations in this one process, for measurements with many organizations
on one machine (experiments/federation.py): a Flower strategy's own loop (`Strategy.start`) sends
real Flower Messages through it, each organization answers with the ClientApp's own reply
(`client_app.train_reply` over its OrgTrainer), and the replies come back as Flower Messages.

    grid = LocalGrid({1: trainer_a, 2: trainer_b, 3: trainer_c})
    strategy.start(grid=grid, initial_arrays=..., num_rounds=3, train_config=ConfigRecord({...}))

What it is not: a transport. No SuperLink, no serialization, no process boundary, no heartbeats;
organizations answer one after another, and a trainer is built once per organization and kept.
Flower's simulation engine (simulation.py, Ray) runs the same work in Ray's actors and ends at the
same global adapter (tests/federation/test_simulation.py); the real multi-process path is
`umbra federation serve|join`, checked against this one by the benchmark's `--deployed` run.
A TRAIN message is answered by `train_reply`; a QUERY (the final global adapter) with an empty
record; an organization that raises answers with an error reply carrying the exception's message,
as a ClientApp would."""

from __future__ import annotations

from collections.abc import Iterable
from uuid import uuid4

from flwr.app import Error, Message, MessageType, RecordDict
from flwr.common.constant import SUPERLINK_NODE_ID
from flwr.serverapp import Grid
from flwr.supercore.task_identity import TaskIdentity

from umbra.federation.client_app import train_reply


class LocalGrid(Grid):
    def __init__(self, trainers: dict[int, object], run_id: int = 1):
        if not trainers or any(int(n) <= 0 or int(n) == SUPERLINK_NODE_ID for n in trainers):
            raise ValueError(f"a LocalGrid needs organizations with positive node ids other than the "
                             f"SuperLink's ({SUPERLINK_NODE_ID})")
        # what Flower's ServerApp runtime sets before a strategy creates messages (run_serverapp.py)
        TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, run_id, SUPERLINK_NODE_ID
        self.trainers = dict(trainers)
        self.reports: list[tuple[int, dict]] = []  # (node, the round's local report), in order
        self._replies: dict[str, Message] = {}
        self._run = None

    def set_run(self, run) -> None:
        self._run = run

    @property
    def run(self):
        return self._run

    def create_message(self, content: RecordDict, message_type: str, dst_node_id: int, group_id: str,
                       ttl: float | None = None) -> Message:
        return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self) -> Iterable[int]:
        return sorted(self.trainers)

    def _answer(self, msg: Message) -> Message:
        node = int(msg.metadata.dst_node_id)
        if node not in self.trainers:
            return Message(Error(code=0, reason=f"node {node} is not in this grid"), reply_to=msg)
        try:
            if msg.metadata.message_type == MessageType.TRAIN:
                reply, report = train_reply(self.trainers[node], msg)
                self.reports.append((node, report))
                return reply
            return Message(RecordDict(), reply_to=msg)
        except Exception as exc:  # noqa: BLE001 - a failing organization is an error reply, as in Flower
            return Message(Error(code=0, reason=f"{type(exc).__name__}: {exc}"), reply_to=msg)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = []
        for msg in messages:
            msg.metadata.__dict__["_message_id"] = str(uuid4())  # as Flower's InMemoryGrid does
            self._replies[msg.metadata.message_id] = self._answer(msg)
            ids.append(msg.metadata.message_id)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return [self._replies.pop(i) for i in message_ids if i in self._replies]

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        return self.pull_messages(list(self.push_messages(messages)))
