"""Document-level DP-SGD for a decoder LoRA on cached trunk states: SecureGate's secure adapter under
differential privacy (seed 003 Fig. 2, "scrubbing + DP"), with NOESIS's engine (dp_sgd.py).

    docs = pack_documents(tokenizer, texts, block_len, fim_rate, seed)    # every block knows its document
    hidden = await trunk_states(model, middle, docs.blocks.ids)           # encoder + middle, once
    plan = plan_run(DPConfig(epsilon=8, epochs=K * T, ...), docs.count)   # σ for the whole schedule
    adapter, losses = train_lora_dp(model, hidden, docs, config, plan, rng, steps, start=global_adapter)

The privacy unit is one document (one file), as in NOESIS: a step draws each document with
probability q (Poisson, from the run's CSPRNG), computes each drawn document's gradient of its mean
next-token loss over ALL its blocks (so a document's whole text contributes one vector), clips it
to C, sums, adds N(0, σ²C²) to every coordinate (drawn every step, an empty batch too) and divides
by the expected batch B (dp_sgd.clipped_sum / noisy_mean). AdamW then steps on that noisy mean:
post-processing, no extra privacy cost. The trunk does not depend on a decoder LoRA, so its states
are computed once and reused by every step (they are a function of the data, never released).

A caller that splits one plan over several calls (a federation's rounds) passes each call its share
of `plan.steps`; `spent_epsilon(σ, q, steps so far, δ)` is what has been spent at any point."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from umbra.errors import ConfigError
from umbra.model.adapters.modules import LoraAdapter, build_adapter
from umbra.model.adapters.selection import AdapterSet
from umbra.tuning.adapter_config import AdapterTrainConfig
from umbra.tuning.dp_sgd import DPPlan, DPRandom, clipped_sum, noisy_mean
from umbra.tuning.dual_adapters import ViewBlocks, frozen, lm_loss, pack_view


@dataclass(frozen=True)
class DocumentViews:
    """Every block of every document, packed per document (not doc_blocks.DocumentBlocks' one window
    per visit: here a document's gradient covers its whole text)."""

    blocks: ViewBlocks  # every document's blocks, one document after another
    owner: torch.Tensor  # [N_blocks] int64: the document each block belongs to

    @property
    def count(self) -> int:
        return int(self.owner.max()) + 1 if len(self.owner) else 0

    def rows(self, doc: int) -> torch.Tensor:
        """Indices of document `doc`'s blocks."""
        return torch.nonzero(self.owner == doc).flatten()


def pack_documents(tokenizer, texts: list[str], block_len: int, fim_rate: float = 0.0, seed: int = 0) -> DocumentViews:
    """Each text packed on its own (pack_view: FIM with probability `fim_rate`, end-of-text, cut into
    blocks, the last padded), so no block mixes two documents."""
    if not texts:
        raise ConfigError("DP training needs at least one document")
    ids, mask, owner = [], [], []
    for i, text in enumerate(texts):
        v = pack_view(tokenizer, [text], block_len, fim_rate, seed * 1_000_003 + i)
        ids.append(v.ids)
        mask.append(v.mask)
        owner.append(torch.full((len(v.ids),), i, dtype=torch.int64))
    return DocumentViews(ViewBlocks(torch.cat(ids), torch.cat(mask), len(texts)), torch.cat(owner))


def per_document_grads(model, adapter: LoraAdapter, hidden: torch.Tensor, docs: DocumentViews,
                       chosen: np.ndarray) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """({name: [P, ...]} the gradient of each chosen document's mean loss over its blocks, losses [P]);
    one backward per document, so each row depends on its document alone."""
    params = dict(adapter.named_parameters())
    grads = {name: [] for name in params}
    losses = []
    t = docs.blocks.ids.shape[1]
    pos = torch.arange(t)
    for doc in chosen:
        rows = docs.rows(int(doc))
        aset = AdapterSet([adapter], frozen=False)
        logits = model.decoder(hidden[rows], pos.expand(len(rows), -1), adapters=aset)
        loss = lm_loss(logits, docs.blocks.ids[rows], docs.blocks.mask[rows])
        got = torch.autograd.grad(loss, list(params.values()))
        for name, g in zip(params, got):
            grads[name].append(g.detach())
        losses.append(float(loss.detach()))
    if not len(chosen):
        return {n: torch.zeros((0, *p.shape)) for n, p in params.items()}, torch.zeros(0)
    return {n: torch.stack(g) for n, g in grads.items()}, torch.tensor(losses)


@dataclass(frozen=True)
class DPStep:
    grad: dict[str, torch.Tensor]  # (Σ ĝ_i + N(0, σ²C²)) / B: what the optimizer steps on
    clipped: dict[str, torch.Tensor]  # Σ ĝ_i, the noiseless part (never leaves the step but for tests)
    drawn: np.ndarray  # the documents Poisson-sampled this step
    losses: torch.Tensor  # [|S|] each drawn document's mean loss


def dp_gradient(model, adapter: LoraAdapter, hidden: torch.Tensor, docs: DocumentViews, plan: DPPlan,
                rng: DPRandom) -> DPStep:
    """One DP-SGD step's privatized gradient: Poisson draw, per-document gradients, clip, noise."""
    drawn = rng.poisson(plan.documents, plan.sample_rate)
    per_doc, losses = per_document_grads(model, adapter, hidden, docs, drawn)
    clipped = clipped_sum(per_doc, plan.clip_norm)
    return DPStep(noisy_mean(clipped, plan, rng), clipped, drawn, losses)


def train_lora_dp(model, hidden: torch.Tensor, docs: DocumentViews, config: AdapterTrainConfig, plan: DPPlan,
                  rng: DPRandom, steps: int, name: str = "secure",
                  start: LoraAdapter | None = None) -> tuple[LoraAdapter, list[float]]:
    """`steps` DP-SGD steps of `plan` on a decoder LoRA of `config` (from `start`, copied, when
    given): (adapter, mean loss of the drawn documents per step, nan for an empty draw)."""
    config.validate()
    if docs.count != plan.documents:
        raise ConfigError(f"the plan is for {plan.documents} documents, the view has {docs.count}")
    if steps < 0:
        raise ConfigError(f"steps must be >= 0, got {steps}")
    adapter = build_adapter(name, config.lora(), model.spec, model.plan.shape(model.spec.num_layers))
    if start is not None:
        adapter.load_state_dict(start.state_dict(), strict=True)
    adapter.requires_grad_(True)
    params = dict(adapter.named_parameters())
    opt = torch.optim.AdamW(params.values(), lr=config.lr, weight_decay=config.weight_decay)
    losses = []
    with frozen(model.decoder):
        for _ in range(steps):
            step = dp_gradient(model, adapter, hidden, docs, plan, rng)
            for n, p in params.items():
                p.grad = step.grad[n].to(p.dtype)
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(float(step.losses.mean()) if len(step.losses) else float("nan"))
    adapter.requires_grad_(False)
    adapter.touch()
    return adapter, losses
