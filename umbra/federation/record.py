"""What the ServerApp received and decided, written to a directory for audit and for the tests:

    messages.jsonl      one line per message the ServerApp received: its node, type, error, and for
                        each record its kind and entries (array name, shape, dtype; metric and config
                        keys and values) — never array contents
    round-<t>/<node>.npz   the update a node sent in round t (arrays + `__samples__`)
    round-<t>/global.npz   the global secure adapter after round t (round-0: the start)
    rounds.jsonl        per round: accepted nodes, samples, rejected nodes with the reason

`RecordingGrid` wraps Flower's Grid so that every reply passes through `describe` on its way in;
the strategy writes the npz files and rounds.jsonl."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def describe(msg) -> dict:
    """A JSON-able manifest of one received Flower Message (no array contents)."""
    out = {"node": int(msg.metadata.src_node_id), "type": str(msg.metadata.message_type),
           "error": msg.error.reason if msg.has_error() else None, "records": {}}
    if msg.has_error():
        return out
    for key, record in msg.content.items():
        kind = type(record).__name__
        if kind == "ArrayRecord":
            entries = {name: {"shape": list(a.shape), "dtype": str(a.dtype)} for name, a in record.items()}
        else:  # MetricRecord / ConfigRecord: scalars and lists
            entries = {name: (v if isinstance(v, (int, float, str, bool)) else repr(type(v)))
                       for name, v in record.items()}
        out["records"][key] = {"kind": kind, "entries": entries}
    return out


class RecordingGrid:
    """A Flower Grid whose every received message is described into `<dir>/messages.jsonl`."""

    def __init__(self, grid, directory: Path):
        self._grid, self._path = grid, Path(directory) / "messages.jsonl"
        self._path.parent.mkdir(parents=True, exist_ok=True)

    def __getattr__(self, name):
        return getattr(self._grid, name)

    def _log(self, messages):
        messages = list(messages)
        with self._path.open("a", encoding="utf-8") as f:
            for m in messages:
                f.write(json.dumps(describe(m)) + "\n")
        return messages

    def send_and_receive(self, messages, *, timeout=None):
        return self._log(self._grid.send_and_receive(messages, timeout=timeout))

    def pull_messages(self, message_ids):
        return self._log(self._grid.pull_messages(message_ids))


def save_arrays(path: Path, arrays, samples: int | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    extra = {} if samples is None else {"__samples__": np.asarray(samples, np.int64)}
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, **{k: np.asarray(v) for k, v in arrays.items()}, **extra)
    tmp.replace(path)


def load_arrays(path: Path) -> tuple[dict[str, np.ndarray], int | None]:
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files if k != "__samples__"}
        samples = int(z["__samples__"]) if "__samples__" in z.files else None
    return arrays, samples


def append_json(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")
