"""An inversion penalty for STuning: keep the tuned encoder's outputs away from what a cloud's
public codebook can invert.

STuning recovers utility by pulling the client encoder's outputs back toward the public model's
split-layer geometry — exactly what nearest-neighbour inversion (attack a) reads: with INDVocab at
ε = 1024, 150 tuning steps took it from chance to 64 % on a mid-training default model. The
client knows the public model too, so it can run that attack on itself while it tunes:

    C      = normalize(centroid of the PUBLIC encoder's state of each token)    [V, d]
    s_t    = normalize(h_t) · Cᵀ / τ                                           [V] per position
    P      = mean over positions of softmax(s_t)[true token]                    in [0, 1]
    loss   = LM loss + λ · P                     (P's gradient stays on the client: encoder only)

The codebook is the attacker's (a) codebook (`umbra.attacks.nearest.centroid_codebook`),
built by `own_codebook` from the client's own blocks run through the public encoder — it lives on
the client and never crosses the wire. Nothing here is a formal guarantee: it trains against one
known attack, and the attack suite measures what it buys against all of them
(docs/privacy/attacks.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from umbra.errors import ConfigError

if TYPE_CHECKING:  # the config loads without torch (CLI --help defaults); the functions import it
    import torch


@dataclass(frozen=True)
class InversionPenalty:
    weight: float = 0.0  # λ; 0 = off
    temperature: float = 0.05  # τ of the simulated attacker's softmax over cosine similarities
    codebook_blocks: int = 128  # blocks of the tuning data whose public states make the codebook

    @property
    def enabled(self) -> bool:
        return self.weight > 0

    def validate(self) -> "InversionPenalty":
        if not (self.weight >= 0 and math.isfinite(self.weight)):
            raise ConfigError(f"inversion penalty weight must be a finite number >= 0, got {self.weight}")
        if not (self.temperature > 0 and math.isfinite(self.temperature)):
            raise ConfigError(f"inversion penalty temperature must be > 0, got {self.temperature}")
        if self.codebook_blocks < 1:
            raise ConfigError("codebook_blocks must be >= 1")
        return self


def penalty(hidden: torch.Tensor, ids: torch.Tensor, codebook: torch.Tensor, temperature: float) -> torch.Tensor:
    """Mean probability the simulated attacker gives the true token. hidden [B,T,d] (autograd
    on), ids [B,T] in the client's id space, codebook [V,d] unit rows in that same id order."""
    import torch
    import torch.nn.functional as F

    scores = F.normalize(hidden.float(), dim=-1) @ codebook.T / temperature  # [B,T,V]
    return torch.softmax(scores, -1).gather(-1, ids[..., None]).mean()


def own_codebook(public, data, settings: InversionPenalty, plan=None) -> torch.Tensor:
    """[V,d] unit rows, public id order: attack (a)'s centroid codebook built from the client's own
    first `settings.codebook_blocks` tuning blocks (`data`: a TuneData of public ids) through the
    PUBLIC encoder — `public` a PublicModel, or the base model's directory (loaded with `plan`).
    Tokens those blocks do not contain get their isolated public state."""
    import numpy as np
    import torch.nn.functional as F

    from umbra.attacks.nearest import centroid_codebook
    from umbra.attacks.public import PublicModel

    if not isinstance(public, PublicModel):
        public = PublicModel(public, plan)
    blocks, _, _ = data.batch(0, 0, settings.codebook_blocks)
    return F.normalize(centroid_codebook(public, np.asarray(blocks)), dim=-1)


def model_order(codebook: torch.Tensor, permutation) -> torch.Tensor:
    """The public-order codebook re-indexed by the client's ids: row p is the centroid of π⁻¹(p)."""
    if permutation is None:
        return codebook
    import numpy as np
    import torch

    public_of = np.asarray(permutation.to_public(np.arange(codebook.shape[0])))
    return codebook[torch.from_numpy(public_of)]
