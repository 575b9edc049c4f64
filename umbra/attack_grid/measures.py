"""What is measured on a tuned frontier cell (umbra/attack_grid/frontier.py): its utility and
the attacks on its traffic, always on the same tuned client.

    utility(public, tuned, evals)                 next-token top-1 per language, test split
    attacks(public, suite, tuned, prompts)        the suite of docs/privacy/attacks.md: (a)–(d) and
                                                  the noise-aware probe on the prompts it sends,
                                                  (e) on its recorded tuning traffic

    shadow(public, suite, tuned, prompts, ...)    the adaptive attacker: its own client of the same
                                                  configuration, tuned on public code, probes at the
                                                  split layer and every middle layer (shadow.py)
    oracle(public, suite, tuned, prompts, held)   probes trained on the client's OWN states of
                                                  held-out files (the valid split): a bound
    decipher(public, suite, tuned, volume)        bigram decipherment over clusters of the sent
                                                  states at 1×, 10× and 100× the prompts' traffic

The client-alone control sends nothing: its attack records are empty by construction (the cloud
has no traffic), and it is evaluated with the middle skipped."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import numpy as np
import torch

from umbra.attack_grid.frontier import FrontierParams, TunedCell, tune_config
from umbra.attack_grid.shadow import build_shadow, shadow_attacks
from umbra.attack_grid.traffic import inference_traffic
from umbra.attacks.public import PublicModel
from umbra.attacks.recorder import RecordingMiddle
from umbra.attacks.decipher import Decipherment
from umbra.attacks.oracle import oracle_attacks, train_oracle, without_attacked
from umbra.attacks.suite import NOISE_AWARE, AttackSuite
from umbra.attacks.volume import times, volume_traffic
from umbra.middle.local import LocalMiddle
from umbra.middle.skip import SkipBlocks
from umbra.tuning.evaluate import next_token

TRAINING_ATTACKS = ("gradient",)


def utility(public: PublicModel, tuned: TunedCell, evals: dict[str, np.ndarray]) -> dict:
    """{"top1": pooled %, "languages": {lang: {"top1": %, "tokens": n, "loss": nats}}} over the
    test-split blocks of each language, in the client's own id space."""
    skip = tuned.cell.variant.middle == "skip"
    middle = SkipBlocks(public.spec.hidden_size) if skip else tuned.middle_blocks(public)
    per, right, total = {}, 0.0, 0
    for lang, blocks in evals.items():
        m = next_token(tuned.client, middle, blocks)
        per[lang] = {"top1": 100 * m.top1, "tokens": m.tokens, "loss": m.loss}
        right, total = right + m.top1 * m.tokens, total + m.tokens
    return {"top1": 100 * right / max(total, 1), "languages": per}


def sent_prompts(public: PublicModel, tuned: TunedCell, prompts: np.ndarray) -> list:
    """What the cloud records when the tuned client sends `prompts` (public ids [N, T]) as
    inference prefills, with the truth attached for scoring; computed once per tuned cell and
    prompts (the attacks, the shadow and the oracle all read the same traffic)."""
    if tuned.sent is not None and tuned.sent[0] is prompts:
        return tuned.sent[1]
    middle = RecordingMiddle(LocalMiddle(public.middle))
    asyncio.run(inference_traffic(tuned.client, middle, prompts))
    tuned.sent = (prompts, middle.sequences())
    return tuned.sent[1]


def attacks(public: PublicModel, suite: AttackSuite, tuned: TunedCell, prompts: np.ndarray) -> dict:
    """{attack: score json} (recovery in [0, 1]); {} for a client that sends nothing."""
    if tuned.cell.variant.middle == "skip":
        return {}
    inference = sent_prompts(public, tuned, prompts)
    names = tuple(n for n in suite.attacks if n not in TRAINING_ATTACKS)
    scores = suite.run(inference, only=names).to_json()
    if "probe" in scores:
        eps = tuned.cell.defence().indvocab_epsilon
        if eps is None or math.isinf(eps):
            scores[NOISE_AWARE] = scores["probe"]
        else:
            scores.update(suite.run(inference, only=(), extra={NOISE_AWARE: suite.noise_aware_probe(eps)}).to_json())
    if tuned.training:
        scores.update(suite.run(tuned.training, only=TRAINING_ATTACKS).to_json())
    return scores


VOLUMES = (1, 10, 100)  # decipherment traffic, in multiples of the grid's prompts


def _score(suite: AttackSuite, sequences: list, attacks: dict) -> dict:
    return suite.run(sequences, only=(), extra=attacks).to_json()


def shadow(public: PublicModel, suite: AttackSuite, tuned: TunedCell, prompts: np.ndarray, params: FrontierParams,
           corpus, cache_dir, device=None) -> dict:
    """The shadow client's probes (split layer, every middle layer, and the layer its own
    validation picks) on the prompts the tuned client sends. One shadow per configuration: it is
    cached by everything that determines it, not by the defender's seed."""
    if tuned.cell.variant.middle == "skip":
        return {}
    cell = tuned.cell
    attacker = build_shadow(public, cell.defence(), tune_config(cell, params) if cell.variant.stuning else None,
                            corpus, cache_dir=cache_dir, middle=public.middle, adapters=tuned.cloud_adapters,
                            defender_seed=cell.seed, device=device)
    return _score(suite, sent_prompts(public, tuned, prompts), shadow_attacks(attacker))


def oracle(public: PublicModel, suite: AttackSuite, tuned: TunedCell, prompts: np.ndarray, held_out: np.ndarray,
           checkpoint: Path | None = None) -> dict:
    """Probes trained on the client's own (state, token) pairs of `held_out` blocks (other files
    than the prompts), at the split layer and every middle layer, applied to its prompts.
    `checkpoint`: a directory for this cell where each layer's probe is kept as it is trained, so
    a stopped run resumes at the next layer."""
    if tuned.cell.variant.middle == "skip":
        return {}
    client = tuned.client
    sent = sent_prompts(public, tuned, prompts)
    held_out, _ = without_attacked(held_out, sent)  # the valid split repeats a few test files verbatim
    probes = train_oracle(client.encoder, client.permutation, held_out, public.middle,
                          min(public.tokenizer.size, public.vocab_size), adapters=tuned.cloud_adapters,
                          private_path=client.private_path, attacked=sent, checkpoint=checkpoint)
    return _score(suite, sent, oracle_attacks(probes, public.middle, tuned.cloud_adapters))


def decipher(public: PublicModel, suite: AttackSuite, tuned: TunedCell, volume: np.ndarray) -> dict:
    """{"1x": score, "10x": ..., "100x": ...}: decipherment of the client's sent split-layer states
    of the first 64·k blocks of `volume` (its own code, other files than the attacker's)."""
    if tuned.cell.variant.middle == "skip":
        return {}
    client, attack = tuned.client, Decipherment(suite.blocks, vocab=public.vocab_size)
    out = {}
    for k in VOLUMES:
        traffic = volume_traffic(client.encoder, client.permutation, times(volume, k), client.private_path,
                                 dtype=torch.float16)
        scores = _score(suite, traffic, {"decipher": attack})
        # an attack that named no cluster (every guess "other") has no score in the suite: it
        # recovered nothing, which the grid records as such rather than failing the cell
        out[f"{k}x"] = scores.get("decipher", {"attack": "decipher", "recovery": 0.0, "tokens_right": 0,
                                               "tokens_scored": 0, "abstained": True,
                                               "sequences": len(traffic)})
    return out
