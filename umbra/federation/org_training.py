"""One organization's part of a federation round (seed 003 §4.2): K local passes over its SCRUBBED
view, starting from the global secure adapter Δw^t, giving Δw_n^{t+1} and |D_n^mask|.

    view = scrubbed_view(read_org_code([Path("src/")]), Scrubber(ScrubConfig(internal_domains=...)))
    trainer = await OrgTrainer.create(model, middle, view, AdapterTrainConfig(...))
    arrays, samples, report = trainer.round(global_arrays, server_round)

The raw code is read and scrubbed here, on the organization's machine, and only the scrubbed view
is packed and trained on: the revealing adapter is no part of a round and never built, and what
`round` returns is the secure LoRA's arrays, the count of scrubbed tokens trained on (the weight of
eq. 3) and a report of numbers (losses, counts; no text, no finding's value). The encoder and the
middle do not depend on a decoder LoRA, so the view's middle outputs are computed once (through the
organization's Middle) and every round trains the decoder LoRA on them (dual_adapters.train_lora).

With `dp` (a private DPConfig: the organization's own choice, `umbra federation join --dp-epsilon`)
the secure adapter is trained by document-level DP-SGD instead (umbra/tuning/dp_lora.py: Poisson
sampling of files, each file's gradient clipped to C, Gaussian noise, opacus' accountant). σ is
planned once for the whole federation, `rounds` rounds of `epochs` expected passes each; round t
runs its share of the plan's steps, and the report says the ε spent so far (`privacy()`). A round
past the planned ones is refused (PrivacyBudgetError): the budget is spent."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from umbra.errors import ConfigError
from umbra.middle.protocol import Middle
from umbra.scrub import Scrubber
from umbra.tuning.adapter_config import AdapterTrainConfig
from umbra.tuning.dual_adapters import pack_view, train_lora, trunk_states
from umbra.federation.adapter_arrays import adapter_to_arrays, arrays_to_adapter

if TYPE_CHECKING:
    from umbra.tuning.noesis_config import DPConfig


@dataclass(frozen=True)
class ScrubbedView:
    texts: tuple[str, ...]  # the scrubbed text of each file (never the raw one)
    findings: dict[str, int]  # replaced spans per kind, summed over the files


def scrubbed_view(files: list[tuple[str, str]], scrubber: Scrubber) -> ScrubbedView:
    """The masked view D_n^mask of an organization's (path, text) files."""
    if not files:
        raise ConfigError("an organization needs at least one file of code to train on")
    texts, findings = [], {}
    for path, text in files:
        result = scrubber.scrub(text, path)
        texts.append(result.text)
        for kind, n in result.counts().items():
            findings[kind] = findings.get(kind, 0) + n
    return ScrubbedView(tuple(texts), findings)


class OrgTrainer:
    """Holds the packed scrubbed view and its cached middle outputs across rounds (and, under DP,
    the plan, the CSPRNG and the steps taken)."""

    def __init__(self, model, view: ScrubbedView, config: AdapterTrainConfig, blocks, hidden, dp=None):
        self.model, self.view, self.config = model, view, config
        self.blocks, self.hidden = blocks, hidden
        self.dp = dp  # None, or (dp_lora.DocumentViews, DPPlan, DPRandom, rounds)
        self.dp_steps = self.dp_rounds = 0

    @classmethod
    async def create(cls, model, middle: Middle, view: ScrubbedView, config: AdapterTrainConfig,
                     dp: "DPConfig | None" = None, rounds: int = 1) -> "OrgTrainer":
        config.validate()
        if dp is not None and dp.private:
            from umbra.tuning.dp_lora import pack_documents
            from umbra.tuning.dp_sgd import DPRandom, plan_run

            if rounds < 1:
                raise ConfigError(f"a DP plan needs the federation's rounds (>= 1), got {rounds}")
            docs = pack_documents(model.tokenizer, list(view.texts), config.block_len, config.fim_rate, config.seed)
            plan = plan_run(replace(dp, epochs=float(config.epochs * rounds)), docs.count)
            hidden = await trunk_states(model, middle, docs.blocks.ids, config.batch_size)
            return cls(model, view, config, docs.blocks, hidden, (docs, plan, DPRandom(dp.noise_seed), rounds))
        blocks = pack_view(model.tokenizer, list(view.texts), config.block_len, config.fim_rate, config.seed)
        hidden = await trunk_states(model, middle, blocks.ids, config.batch_size)
        return cls(model, view, config, blocks, hidden)

    @property
    def samples(self) -> int:
        """|D_n^mask|: real (unpadded) tokens of the scrubbed view."""
        return self.blocks.tokens

    def privacy(self) -> dict | None:
        """Under DP: the plan and the ε spent by the steps taken so far (None without DP)."""
        if self.dp is None:
            return None
        from umbra.tuning.dp_sgd import spent_epsilon

        _, plan, _, rounds = self.dp
        out = plan.record()
        out.update(rounds=rounds, rounds_taken=self.dp_rounds, steps_taken=self.dp_steps,
                   epsilon_spent=spent_epsilon(plan.noise_multiplier, plan.sample_rate, self.dp_steps, plan.delta,
                                               plan.accountant))
        return out

    @property
    def dp_progress(self) -> dict[str, int] | None:
        """Under DP: the rounds and steps taken so far (what `resume` takes back); None without DP."""
        return None if self.dp is None else {"rounds-taken": self.dp_rounds, "steps-taken": self.dp_steps}

    def resume(self, progress: dict[str, int] | None) -> None:
        """Take up a DP plan where an earlier process left it: a deployed ClientApp runs in a new
        process for every message, so the rounds and steps taken live in the node's Flower context
        between rounds, not here. A seeded CSPRNG is re-keyed per resumed round (a resumed process
        must not replay round 1's draws); the OS-keyed one needs nothing."""
        if self.dp is None or not progress:
            return
        rounds, steps = int(progress["rounds-taken"]), int(progress["steps-taken"])
        if (rounds, steps) == (self.dp_rounds, self.dp_steps):
            return
        if rounds < self.dp_rounds or steps < self.dp_steps:
            raise ConfigError(f"the node's DP progress ({rounds} rounds, {steps} steps) is behind this trainer's "
                              f"({self.dp_rounds}, {self.dp_steps}): refusing to spend the budget twice")
        from umbra.tuning.dp_sgd import DPRandom

        docs, plan, rng, planned = self.dp
        if rng.seed is not None:
            rng = DPRandom(rng.seed, stream=f"resume-{rounds}")
        self.dp = (docs, plan, rng, planned)
        self.dp_rounds, self.dp_steps = rounds, steps

    def round(self, global_arrays, server_round: int) -> tuple[dict[str, np.ndarray], int, dict]:
        """(Δw_n^{t+1} as arrays, |D_n^mask|, report) from Δw^t. The batch order differs per round
        (seed + round); the start is the global adapter, copied."""
        if server_round < 1:
            raise ConfigError(f"rounds count from 1, got {server_round}")
        t0 = time.perf_counter()
        start = arrays_to_adapter(global_arrays, self.model, self.config, "secure-global")
        config = replace(self.config, seed=self.config.seed + server_round)
        if self.dp is not None:
            adapter, losses = self._dp_round(start, config)
            epoch_losses = [float(np.nanmean(losses))] if losses and not np.isnan(losses).all() else []
        else:
            adapter, losses, epoch_losses = train_lora(self.model, self.hidden, self.blocks, config, "secure",
                                                       start=start)
        report = {"round": server_round, "steps": len(losses), "epoch_losses": [round(x, 4) for x in epoch_losses],
                  "tokens": self.samples, "seconds": round(time.perf_counter() - t0, 2)}
        if self.dp is not None:
            report["privacy"] = self.privacy()
        return adapter_to_arrays(adapter), self.samples, report

    def _dp_round(self, start, config: AdapterTrainConfig):
        from umbra.tuning.dp_lora import train_lora_dp
        from umbra.tuning.dp_sgd import PrivacyBudgetError

        docs, plan, rng, rounds = self.dp
        done = self.dp_rounds
        if done >= rounds:
            raise PrivacyBudgetError(f"the DP budget (ε = {plan.target_epsilon:g} over {rounds} rounds) is spent: "
                                     f"{self.dp_steps} of {plan.steps} steps taken; this organization trains no more")
        steps = (done + 1) * plan.steps // rounds - self.dp_steps
        adapter, losses = train_lora_dp(self.model, self.hidden, docs, config, plan, rng, steps, "secure", start=start)
        self.dp_steps += steps
        self.dp_rounds += 1
        return adapter, losses
