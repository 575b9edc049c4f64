"""Measure training throughput (tokens/s) of a model configuration on this machine."""

from __future__ import annotations

import contextlib
import time

import torch

from umbra.training.config import TrainConfig
from umbra.training.model import build_model, count_params
from umbra.training.trainer import make_optimizer


def measure_throughput(cfg: TrainConfig, steps: int = 8, warmup: int = 3) -> dict:
    """Run `warmup + steps` optimizer steps on random tokens; report params and tokens/s."""
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    model = build_model(cfg.model, enforce_limits=False)
    opt = make_optimizer(model, cfg)
    forward = torch.compile(model) if cfg.compile else model
    ids = torch.randint(0, cfg.model.vocab_size, (cfg.batch_size, cfg.model.context_length))
    ctx = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if cfg.bf16 else contextlib.nullcontext
    start = 0.0
    for i in range(warmup + steps):
        if i == warmup:
            start = time.perf_counter()
        with ctx():
            loss = forward(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    seconds = (time.perf_counter() - start) / steps
    tps = cfg.tokens_per_step() / seconds
    return {"params": count_params(model), "tokens_per_s": round(tps),
            "hours_for_budget": round(cfg.total_tokens / tps / 3600, 2)}
