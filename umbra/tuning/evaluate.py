"""Utility of a (tuned) client in its own id space: next-token accuracy / perplexity with labels
π(t) and FIM line exact match through the completion engine with the private tokenizer.

Both reuse umbra.evaluation unchanged; the only thing that differs between a defended client and
fClean is the id space, which `model_ids` / the tokenizer's permutation take care of. At ε = ∞
(no INDVocab noise, π only) every figure equals the public model's (tests/tuning). A client with a
private local path (umbra/model/private_path.py) is scored through it, keyed noise included, as
the engine runs it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from umbra.engine import ClientModel, CompletionEngine
from umbra.engine.fim import detect_format
from umbra.engine.tokenizer import ClientTokenizer
from umbra.evaluation.fim_lines import FimCase, FimLineResult, fim_line_exact_match
from umbra.evaluation.next_token import NextTokenMetrics, lean_logits_fn, next_token_metrics
from umbra.model.parts import MiddleBlocks, SplitPlan
from umbra.model.private_path import split_logits
from umbra.tuning.client import Tunable


def next_token(client: Tunable, middle: MiddleBlocks, public_blocks: np.ndarray,
               batch_size: int = 8) -> NextTokenMetrics:
    """Next-token metrics over blocks of public ids, run and scored in the client's id space."""
    blocks = public_blocks if client.permutation is None else client.permutation.to_private(
        np.asarray(public_blocks, dtype=np.int64))
    path = getattr(client, "private_path", None)
    fn = lean_logits_fn(client.encoder, middle, client.decoder) if path is None else \
        (lambda ids: split_logits(client.encoder, middle, client.decoder, path, ids))
    with torch.no_grad():
        return next_token_metrics(fn, blocks, batch_size)


def client_model(client: Tunable, base_dir: str | Path) -> ClientModel:
    """A ClientModel over the client's (in-memory) parts, for the completion engine; the middle
    comes from `base_dir` (the public base model)."""
    base = Path(base_dir)
    tokenizer = ClientTokenizer.from_dir(base, permutation=client.permutation)
    plan = SplitPlan(len(client.encoder.stack.layers), len(client.decoder.stack.layers))
    return ClientModel(base, client.encoder.spec, plan, tokenizer, detect_format(tokenizer), client.encoder,
                       client.decoder, None, private_path=getattr(client, "private_path", None))


async def fim_exact_match(client: Tunable, base_dir: str | Path, cases: list[FimCase], max_tokens: int = 48,
                          middle: MiddleBlocks | None = None) -> FimLineResult:
    """FIM line exact match (umbra.evaluation.fim_lines), greedy, whole model in-process."""
    model = client_model(client, base_dir)
    engine = CompletionEngine.monolithic(model) if middle is None else _with_middle(model, middle)
    return await fim_line_exact_match(engine, cases, max_tokens)


def _with_middle(model: ClientModel, middle: MiddleBlocks) -> CompletionEngine:
    """CompletionEngine.monolithic without reloading the middle blocks from disk."""
    from umbra.engine.runner import MonolithicRunner

    return CompletionEngine(model, lambda: MonolithicRunner(model.encoder, middle, model.decoder, model.private_path),
                            "monolithic")
