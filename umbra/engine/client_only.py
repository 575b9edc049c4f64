"""Client-only completion: the client's own blocks alone, nothing sent anywhere.

The privacy-first choice and the draft model in one (issue 58, point 6): the encoder's output
goes straight into the decoder (the middle skipped, as in umbra/middle/skip.py and the draft
model of speculative decoding, draft.py). No cloud connection is opened, no hidden state leaves
the process, and a completion costs no round trip. It runs without a private local path's noise
(nothing is sent, so there is nothing to defend), exactly like the draft model: the completions
of `umbra complete --client-only` are the drafts speculation would make. Under a bundle tuned with
the clean residual the encoder reads the clean table (draft.py): the tuned decoder's own input
when the middle is skipped.

    engine = client_only_engine(model, config)       # CompletionEngine, mode "client-only"
    result = await engine.complete(prefix, suffix)   # result.round_trips == 0

Quality is the client blocks' alone (docs/benchmarks.md, "Accepted lines": the client-only
row beside the split's)."""

from __future__ import annotations

from umbra.engine.config import EngineConfig
from umbra.engine.draft import SkipRunner
from umbra.engine.engine import CompletionEngine
from umbra.engine.model import ClientModel

MODE = "client-only"


class ClientOnlyRunner(SkipRunner):
    """Encoder -> decoder in process; the middle is the identity, so there are no trips."""

    round_trips = 0


def client_only_engine(model: ClientModel, config: EngineConfig | None = None) -> CompletionEngine:
    """A completion engine over the client's blocks alone (no Middle, nothing sent, no speculation:
    there is no trip to save)."""
    return CompletionEngine(model, lambda: ClientOnlyRunner(model.encoder, model.decoder, model.private_path),
                            MODE, config)
