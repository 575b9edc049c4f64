"""The client-side completion engine: FIM prompts, sampling, stop rules, post-processing and
prefix reuse, written once against a runner (split through any Middle, or monolithic).

    from umbra.engine import ClientModel, CompletionEngine, EngineConfig, CancelToken

    model = ClientModel.load(model_dir, plan)             # ConfigError if the dir is incomplete
    middle = RemoteMiddle(url, token, hidden_size=model.spec.hidden_size)   # or LocalMiddle(...)
    info = await middle.connect()
    engine = CompletionEngine.split(model, middle, EngineConfig(), context_length=info["max_seq_len"])
    # engine = CompletionEngine.monolithic(model)         # baseline, nothing leaves the process

    session = engine.new_session()                        # one per editor buffer, kept warm
    result = await session.complete(prefix, suffix, config=None, cancel=CancelToken())
    result.text                                           # insert at the cursor
    result.recomputed_tokens / reused_tokens / prompt_tokens / generated_tokens
    result.prefill_seconds / decode_seconds / stop_reason / evicted
    await session.close(); await middle.aclose()          # the caller owns the Middle

A language server keeps one session per document and, on a new keystroke, cancels the task of
the previous request (or its CancelToken) before starting the next; requests on one session
are serialised and a cancelled one leaves the caches consistent. Compute runs on the event
loop's thread; awaits (the middle, and a yield between steps) are the cancellation points.
Errors are UmbraError subclasses: CloudUnavailable / CloudRejected come from the Middle and
must be shown to the user as such (never retried on another path)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from umbra.lazy import exports

# Names resolve on first use (PEP 562), so that importing the torch-free configs, e.g. for a CLI's
# --help defaults, does not import torch and the model code.
_HOME = {
    "EngineConfig": "config", "PromptConfig": "config", "SamplingConfig": "config", "StopConfig": "config",
    "CompletionEngine": "engine",
    "ClientModel": "model", "check_model_dir": "model",
    "CancelToken": "session", "CompletionResult": "session", "CompletionSession": "session",
}
__all__ = sorted(_HOME)

if TYPE_CHECKING:
    from umbra.engine.config import EngineConfig, PromptConfig, SamplingConfig, StopConfig
    from umbra.engine.engine import CompletionEngine
    from umbra.engine.model import ClientModel, check_model_dir
    from umbra.engine.session import CancelToken, CompletionResult, CompletionSession


__getattr__ = exports(__name__, _HOME)
