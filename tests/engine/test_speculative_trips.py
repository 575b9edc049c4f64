"""Round trips of an editor's completion session through the real cloud service (uvicorn on a
loopback socket, the default model's middle blocks): a new session pays one trip for its first
prefill (the open travels with the frame), and a warm session one for the prefill of each edit,
typed or deleted (truncate and new positions in one frame); the completions equal the in-process
split's, and a longer completion costs one trip per verify frame (the stream's upgrade follows
the first, over HTTP)."""

from __future__ import annotations

import sys
from pathlib import Path

_REPO = str(Path(__file__).resolve().parents[2])
if sys.path[0] != _REPO:  # the real `server` package, not tests/server
    sys.path.insert(0, _REPO)

import pytest  # noqa: E402

from server.launch import local_cloud_thread  # noqa: E402
from umbra.engine import ClientModel, CompletionEngine, EngineConfig, StopConfig  # noqa: E402
from umbra.engine.config import SpeculationConfig  # noqa: E402
from umbra.middle.local import LocalMiddle  # noqa: E402
from umbra.middle.remote import RemoteMiddle  # noqa: E402

ROOT = Path(_REPO)
DEFAULT_MODEL = ROOT / "models" / "umbra-code-tiny"


@pytest.fixture(scope="module")
def model() -> ClientModel:
    return ClientModel.load(DEFAULT_MODEL)


def _config(max_tokens: int) -> EngineConfig:
    return EngineConfig(stop=StopConfig(max_tokens=max_tokens, multiline=True), speculation=SpeculationConfig(mode="on"))


async def test_a_warm_editor_session_pays_one_trip_per_edit_prefill(model):
    text = (ROOT / "umbra/engine/stops.py").read_text()
    at = text.index("\n", len(text) // 2) + 1
    edits = [  # (prefix, suffix, max_tokens) as an editor sends them, one keystroke apart
        (text[:at], text[at:], 1),  # a new session: open + prefill
        (text[:at], text[at:], 16),  # the same cursor: decoding opens the stream
        (text[:at + 4], text[at + 4:], 1),  # typed four characters
        (text[:at + 5], text[at + 5:], 1),  # one more
        (text[:at + 3], text[at + 3:], 1),  # deleted two (the cloud's cache is cut in the same frame)
        (text[:at + 3], text[at + 3:], 16),
    ]
    local = CompletionEngine.split(model, LocalMiddle(model.load_middle()))
    with local_cloud_thread(DEFAULT_MODEL, settings={"torch_threads": 1}) as cloud:
        async with RemoteMiddle(cloud.base_url, cloud.token, hidden_size=model.spec.hidden_size) as middle:
            engine = CompletionEngine.split(model, middle, context_length=middle.info["max_seq_len"])
            async with engine.session(_config(16)) as remote, local.session(_config(16)) as here:
                for i, (prefix, suffix, budget) in enumerate(edits):
                    got = await remote.complete(prefix, suffix, _config(budget))
                    want = await here.complete(prefix, suffix, _config(budget))
                    assert (got.text, got.tokens) == (want.text, want.tokens), i
                    if budget == 1:
                        assert got.round_trips == 1, (i, got.round_trips)  # the prefill and nothing else
                    else:
                        # one trip per verify frame: the stream's upgrade follows the first (over HTTP)
                        assert got.round_trips == got.speculation.frames, (i, got.round_trips)
