"""What is measured on a tuned frontier cell (umbra/attack_grid/frontier.py): its utility and
the attacks on its traffic, always on the same tuned client.

    utility(public, tuned, evals)                 next-token top-1 per language, test split
    attacks(public, suite, tuned, prompts)        the suite of docs/privacy/attacks.md: (a)–(d) and
                                                  the noise-aware probe on the prompts it sends,
                                                  (e) on its recorded tuning traffic

The client-alone control sends nothing: its attack record is empty by construction (the cloud
has no traffic), and it is evaluated with the middle skipped."""

from __future__ import annotations

import asyncio
import math

import numpy as np

from umbra.attack_grid.frontier import TunedCell
from umbra.attack_grid.traffic import inference_traffic
from umbra.attacks.public import PublicModel
from umbra.attacks.recorder import RecordingMiddle
from umbra.attacks.suite import NOISE_AWARE, AttackSuite
from umbra.middle.local import LocalMiddle
from umbra.middle.skip import SkipBlocks
from umbra.tuning.evaluate import next_token

TRAINING_ATTACKS = ("gradient",)


def utility(public: PublicModel, tuned: TunedCell, evals: dict[str, np.ndarray]) -> dict:
    """{"top1": pooled %, "languages": {lang: {"top1": %, "tokens": n, "loss": nats}}} over the
    test-split blocks of each language, in the client's own id space."""
    skip = tuned.cell.variant.middle == "skip"
    middle = SkipBlocks(public.spec.hidden_size) if skip else public.middle
    per, right, total = {}, 0.0, 0
    for lang, blocks in evals.items():
        m = next_token(tuned.client, middle, blocks)
        per[lang] = {"top1": 100 * m.top1, "tokens": m.tokens, "loss": m.loss}
        right, total = right + m.top1 * m.tokens, total + m.tokens
    return {"top1": 100 * right / max(total, 1), "languages": per}


def sent_prompts(public: PublicModel, tuned: TunedCell, prompts: np.ndarray) -> list:
    """What the cloud records when the tuned client sends `prompts` (public ids [N, T]) as
    inference prefills, with the truth attached for scoring."""
    middle = RecordingMiddle(LocalMiddle(public.middle))
    asyncio.run(inference_traffic(tuned.client, middle, prompts))
    return middle.sequences()


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
