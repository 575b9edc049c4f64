"""The client-side completion engine: FIM prompts, sampling, stop rules, post-processing and
prefix reuse, written once against a runner (split through any Middle, or monolithic)."""

from umbra.engine.config import EngineConfig, PromptConfig, SamplingConfig, StopConfig
from umbra.engine.engine import CompletionEngine
from umbra.engine.model import ClientModel, check_model_dir
from umbra.engine.session import CancelToken, CompletionResult, CompletionSession

__all__ = [
    "CancelToken",
    "ClientModel",
    "CompletionEngine",
    "CompletionResult",
    "CompletionSession",
    "EngineConfig",
    "PromptConfig",
    "SamplingConfig",
    "StopConfig",
    "check_model_dir",
]
