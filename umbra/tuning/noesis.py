"""NOESIS (seed 000 Alg. 1) on the split client: DP shared parameters, then per-language experts.

    docs = DocumentBlocks(train_documents, model.tokenizer, block_len=config.block_len, fim_rate=0.5)
    shared = await train_shared(model, middle, docs, StageOneConfig())          # stage 1, DP-SGD
    experts = await train_experts(model, middle, by_language, (shared.adapter,))  # stage 2, AdamW

Stage 1 (DESIGN §4): Poisson-sampled documents of every language, one block each, per-document
gradients of the shared parameters (per_sample.py) clipped to C and summed, Gaussian noise σC
from the run's CSPRNG, divided by the expected batch, AdamW on the result. σ is planned by the
accountant before the first step (dp_sgd.plan_run) and the plan — q, steps, σ, the ε spent — is
what the bundle records. Every chunk of documents has the same shape (padding rows weighted 0),
so neither the operations nor what the cloud receives depend on which documents were drawn.

Stage 2: one LoRA expert per language on the client's decoder blocks (invariant 7), plain AdamW
on that language's documents, the stage-1 parameters frozen in place (a soft prompt goes into the
cached trunk; decoder adapters sit beside the expert) — dual_adapters.train_view_adapter. Experts
see only their own language, so no expert's weights depend on another language's documents."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from umbra.errors import ConfigError
from umbra.middle.protocol import Middle
from umbra.model.adapters.modules import Adapter, LoraAdapter
from umbra.tuning.doc_blocks import DocumentBlocks, padded_rows, split_rows
from umbra.tuning.dp_sgd import DPPlan, DPRandom, clipped_sum, noisy_mean, plan_run
from umbra.tuning.adapter_config import AdapterTrainConfig
from umbra.tuning.dual_adapters import AdapterReport, train_view_adapter
from umbra.tuning.per_sample import batch_grads, per_sample_grads
from umbra.tuning.noesis_config import StageOneConfig
from umbra.tuning.shared_params import SharedParams


@dataclass
class SharedResult:
    params: SharedParams  # trained, frozen
    plan: DPPlan  # q, steps, σ, the ε spent
    losses: list[float]  # mean loss of each step's sampled blocks (a diagnostic: NOT covered by the DP guarantee)
    batch_sizes: list[int]  # |S| of each step (Poisson)
    seconds: float

    @property
    def adapter(self) -> Adapter | None:
        return self.params.adapter

    def training_record(self, config: StageOneConfig, languages: dict[str, int]) -> dict:
        """The manifest's `training` entry: how, on what, how long (no document text, no loss)."""
        return {"method": "noesis-stage1/dp-sgd", "family": config.shared.family,
                "documents": languages, "steps": self.plan.steps, "context_length": config.context_length,
                "block_len": config.block_len, "physical_batch": config.physical_batch, "lr": config.lr,
                "fim_rate": config.fim_rate, "seconds": round(self.seconds, 1)}


Progress = Callable[[int, int, float], None]  # (step, steps, loss)


async def dp_step(shared: SharedParams, middle: Middle, session: str, docs: DocumentBlocks, chosen, plan: DPPlan,
                  config: StageOneConfig, rng: DPRandom) -> tuple[dict[str, torch.Tensor], float]:
    """The update of one step from the sampled documents `chosen` (one block each): clipped
    per-document gradients summed over equal-shaped chunks, noised, over the expected batch —
    or, non-private, the plain gradient of the summed losses over B. Returns (update, Σ losses)."""
    total = {n: torch.zeros_like(p) for n, p in shared.parameters().items()}
    device = next(iter(total.values())).device  # the model's: rows are drawn on the CPU
    blocks = docs.train_blocks(chosen, rng, rows=padded_rows(len(chosen), config.physical_batch)).to(device)
    loss = 0.0
    for chunk in split_rows(blocks, config.physical_batch):
        if config.dp.private:
            per_doc, rows = await per_sample_grads(shared, middle, session, chunk)
            summed = clipped_sum(per_doc, plan.clip_norm, chunk.weight)
        else:
            summed, rows = await batch_grads(shared, middle, session, chunk)
        for n in total:
            total[n] += summed[n]
        loss += float((rows * chunk.weight).sum())
    return noisy_mean(total, plan, rng), loss


async def train_shared(model, middle: Middle, docs: DocumentBlocks, config: StageOneConfig = StageOneConfig(),
                       progress: Progress | None = None) -> SharedResult:
    """Stage 1: the shared parameters by document-level DP-SGD over every language's documents
    (non-private when config.dp.epsilon is inf: same sampling and schedule, no clip, no noise)."""
    config.validate()
    if docs.block_len != config.block_len:
        raise ConfigError(f"documents cut in {docs.block_len}-token blocks; this config needs {config.block_len}")
    plan = plan_run(config.dp, len(docs))
    shared = SharedParams(model, config.shared)
    params = shared.parameters()
    rng = DPRandom(config.dp.noise_seed)  # sampling, offsets, FIM draws and noise: one CSPRNG
    opt = torch.optim.AdamW(list(params.values()), lr=config.lr, weight_decay=config.weight_decay)
    losses, sizes = [], []
    t0 = time.perf_counter()
    frozen_flags = {id(p): p.requires_grad for p in shared.holder.parameters()}
    shared.train()
    session = await middle.open_session(training=True)
    try:
        for step in range(plan.steps):
            chosen = rng.poisson(len(docs), plan.sample_rate)
            update, step_loss = await dp_step(shared, middle, session, docs, chosen, plan, config, rng)
            for lr_group in opt.param_groups:
                lr_group["lr"] = config.lr * min(1.0, (step + 1) / max(1, config.warmup_steps))
            for n, p in params.items():
                p.grad = update[n].to(p.dtype)
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(float(step_loss) / max(1, len(chosen)) if len(chosen) else math.nan)
            sizes.append(len(chosen))
            if progress is not None:
                progress(step + 1, plan.steps, losses[-1])
    finally:
        await middle.close(session)
        for p in shared.holder.parameters():
            p.requires_grad_(frozen_flags[id(p)])
    shared.freeze()
    return SharedResult(shared, plan, losses, sizes, time.perf_counter() - t0)


async def train_experts(model, middle: Middle, texts_by_language: dict[str, list[str]],
                        shared: tuple[Adapter, ...] = (), config: AdapterTrainConfig = AdapterTrainConfig(),
                        name: str = "expert-{language}") -> dict[str, tuple[LoraAdapter, AdapterReport]]:
    """Stage 2: one decoder LoRA per language on its own texts, the `shared` adapters frozen in place.
    An empty language is an error (an expert of nothing would silently serve the base)."""
    empty = sorted(lang for lang, texts in texts_by_language.items() if not texts)
    if empty:
        raise ConfigError(f"no documents for language(s) {', '.join(empty)}: nothing to train an expert on")
    out = {}
    for lang in sorted(texts_by_language):
        out[lang] = await train_view_adapter(model, middle, texts_by_language[lang], config,
                                             name.format(language=lang), shared)
    return out
