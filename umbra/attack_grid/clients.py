"""Simulated clients for the attack benchmark: the public model's client parts with a chosen
set of defences, built in memory with the same mechanisms a bundle uses (INDVocab.randomize,
Permutation.random + to_private_order_) but no keyring and no files — or a real client bundle.

A client feeds its private ids to its encoder; the attack suite only ever sees what comes out."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from umbra.errors import ConfigError
from umbra.model.loader import load_client
from umbra.model.parts import ClientDecoder, ClientEncoder, SplitPlan
from umbra.model.private_path import PrivatePath
from umbra.privacy.indvocab import INDVocab, INDVocabConfig
from umbra.privacy.ltokenizer import Permutation, to_private_order_


@dataclass(frozen=True)
class Defence:
    """One row of the attack table."""

    indvocab_epsilon: float | None = None  # None: the public table; math.inf: INDVocab at ε = ∞ (no noise)
    ltokenizer: bool = False  # secret permutation of the vocabulary
    stuning: bool = False  # client blocks split-fine-tuned (needs umbra.tuning)
    h: float = 0.25  # INDVocab temperature
    gradient_noise: float = 0.0  # STuning: σ of the clip-and-noise on the sent gradient (0: exact)
    tune_locally: bool = False  # STuning with the public middle run on the client: no gradient is sent
    inversion_penalty: float = 0.0  # STuning: λ of the inversion penalty (0: off)

    @property
    def label(self) -> str:
        parts = []
        if self.indvocab_epsilon is not None:
            parts.append("INDVocab")
        if self.ltokenizer:
            parts.append("LTokenizer")
        if self.stuning:
            guards = [text for on, text in ((self.tune_locally, "middle run locally"),
                                            (self.gradient_noise, f"gradient noise σ={self.gradient_noise:g}"),
                                            (self.inversion_penalty, f"inversion penalty λ={self.inversion_penalty:g}"))
                      if on]
            parts.append("STuning" + (f" ({', '.join(guards)})" if guards else ""))
        return " + ".join(parts) or "no defence"

    @property
    def epsilon(self) -> float:
        return math.inf if self.indvocab_epsilon is None else self.indvocab_epsilon


@dataclass(eq=False)
class SimulatedClient:
    encoder: ClientEncoder
    decoder: ClientDecoder
    permutation: Permutation | None  # None: private ids are public ids
    defence: Defence
    private_path: PrivatePath | None = None  # umbra.tuning.private_path.attach_private_path sets it

    def private(self, public_ids: np.ndarray) -> torch.Tensor:
        ids = np.asarray(public_ids, dtype=np.int64)
        return torch.from_numpy(ids if self.permutation is None else self.permutation.to_private(ids))


def build_client(public_dir, defence: Defence, plan: SplitPlan | None = None, seed: int = 0) -> SimulatedClient:
    """The client parts of `public_dir` with `defence` applied (STuning is applied by the caller,
    through the tuning loop, on the returned parts)."""
    if defence.indvocab_epsilon is not None and (math.isnan(defence.indvocab_epsilon) or defence.indvocab_epsilon < 0):
        raise ConfigError("indvocab_epsilon must be >= 0, math.inf or None")
    encoder, decoder = load_client(public_dir, plan, torch.float32)
    if defence.indvocab_epsilon is not None:
        table = INDVocab(INDVocabConfig(defence.indvocab_epsilon, defence.h)).randomize(
            encoder.embed_tokens.weight, seed=f"client-{seed}")
        with torch.no_grad():
            encoder.embed_tokens.weight.copy_(table)
    perm = None
    if defence.ltokenizer:
        rng = np.random.default_rng(seed + 7919)  # reproducible benchmark draw; bundles use `secrets`
        perm = Permutation(rng.permutation(encoder.embed_tokens.weight.shape[0]))
        to_private_order_(encoder, decoder, perm)
    return SimulatedClient(encoder, decoder, perm, defence)


def client_from_bundle(bundle) -> SimulatedClient:
    """A loaded ClientBundle (umbra.privacy.bundle.load_bundle) as a client of the benchmark."""
    eps = bundle.manifest.epsilon
    return SimulatedClient(bundle.encoder, bundle.decoder, bundle.permutation,
                           Defence(indvocab_epsilon=eps, ltokenizer=True, h=bundle.manifest.h))
