"""Per-document next-token scores of a split model with a set of adapters (NOESIS tables, and the
membership-inference score of seed 000 App. C.4).

For each evaluation block (one per document): the number of predicted tokens, how many the model
predicted exactly (top-1), and the summed cross-entropy. Accuracy per language is Σ correct / Σ
count; the attack's score of a document is its mean log-likelihood, −loss / count."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from umbra.errors import ConfigError
from umbra.middle.protocol import Middle
from umbra.model.adapters.config import Kind
from umbra.model.adapters.modules import Adapter
from umbra.model.adapters.selection import AdapterSet
from umbra.model.device import device_of


@dataclass(frozen=True)
class DocScores:
    count: np.ndarray  # [N] predicted tokens per document
    correct: np.ndarray  # [N] exact top-1 predictions
    loss: np.ndarray  # [N] summed cross-entropy (nats)

    @property
    def accuracy(self) -> float:
        total = int(self.count.sum())
        return float(self.correct.sum()) / total if total else float("nan")

    @property
    def mean_loss(self) -> float:
        total = int(self.count.sum())
        return float(self.loss.sum()) / total if total else float("nan")

    def grouped(self, group: np.ndarray, groups: int) -> DocScores:
        """Rows summed by `group` [N] (values in [0, groups)): a document's blocks as one document."""
        group = np.asarray(group)
        if group.shape != self.count.shape or (group.size and (group.min() < 0 or group.max() >= groups)):
            raise ConfigError(f"group must give each of the {self.count.size} rows a group in [0, {groups})")
        return DocScores(*(np.bincount(group, weights=x, minlength=groups) for x in (self.count, self.correct, self.loss)))

    @property
    def log_likelihood(self) -> np.ndarray:
        """[N] mean log-likelihood per token of each document (the attack's score)."""
        return -self.loss / np.maximum(self.count, 1)


async def doc_scores(model, middle: Middle, ids: torch.Tensor, mask: torch.Tensor,
                     adapters: tuple[Adapter, ...] = (), batch_size: int = 8) -> DocScores:
    """Scores of blocks ids/mask [N, T] (client ids; mask True at real tokens) with `adapters`
    (a soft prompt among them is prepended, the rest act on the decoder), through `middle`."""
    prompts = [a.prompt.detach() for a in adapters if a.kind is Kind.SOFT_PROMPT]
    prompt = torch.cat(prompts) if prompts else None
    n = 0 if prompt is None else prompt.shape[0]
    on_blocks = [a for a in adapters if a.kind is not Kind.SOFT_PROMPT]
    aset = AdapterSet(on_blocks) if on_blocks else None
    counts, corrects, losses = [], [], []
    device = device_of(model.encoder)  # blocks are assembled on the CPU; scores come back to it
    session = await middle.open_session(training=True)
    try:
        for i in range(0, len(ids), batch_size):
            x, m = ids[i : i + batch_size].to(device), mask[i : i + batch_size].to(device)
            pos = torch.arange(n + x.shape[1], device=device).expand(x.shape[0], -1)
            with torch.no_grad():
                e = model.encoder.embed(x)
                if prompt is not None:
                    e = torch.cat([prompt.to(e.dtype).expand(x.shape[0], -1, -1), e], 1)
                y = await middle.forward(model.encoder(None, pos, embeds=e), pos, session)
                logits = model.decoder(y, pos, adapters=aset)[:, n:-1].float()  # [B,T-1,V]
                target = x[:, 1:]
                valid = m[:, 1:] & m[:, :-1]
                nll = F.cross_entropy(logits.transpose(1, 2), target, reduction="none")
                counts.append(valid.sum(1))
                corrects.append(((logits.argmax(-1) == target) & valid).sum(1))
                losses.append((nll * valid).sum(1))
    finally:
        await middle.close(session)
    return DocScores(torch.cat(counts).cpu().numpy(), torch.cat(corrects).cpu().numpy(),
                     torch.cat(losses).double().cpu().numpy())
