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
organization's Middle) and every round trains the decoder LoRA on them (dual_adapters.train_lora)."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np

from umbra.errors import ConfigError
from umbra.middle.protocol import Middle
from umbra.scrub import Scrubber
from umbra.tuning.adapter_config import AdapterTrainConfig
from umbra.tuning.dual_adapters import pack_view, train_lora, trunk_states
from umbra.federation.adapter_arrays import adapter_to_arrays, arrays_to_adapter


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
    """Holds the packed scrubbed view and its cached middle outputs across rounds."""

    def __init__(self, model, view: ScrubbedView, config: AdapterTrainConfig, blocks, hidden):
        self.model, self.view, self.config = model, view, config
        self.blocks, self.hidden = blocks, hidden

    @classmethod
    async def create(cls, model, middle: Middle, view: ScrubbedView, config: AdapterTrainConfig) -> "OrgTrainer":
        config.validate()
        blocks = pack_view(model.tokenizer, list(view.texts), config.block_len, config.fim_rate, config.seed)
        hidden = await trunk_states(model, middle, blocks.ids, config.batch_size)
        return cls(model, view, config, blocks, hidden)

    @property
    def samples(self) -> int:
        """|D_n^mask|: real (unpadded) tokens of the scrubbed view."""
        return self.blocks.tokens

    def round(self, global_arrays, server_round: int) -> tuple[dict[str, np.ndarray], int, dict]:
        """(Δw_n^{t+1} as arrays, |D_n^mask|, report) from Δw^t. The batch order differs per round
        (seed + round); the start is the global adapter, copied."""
        if server_round < 1:
            raise ConfigError(f"rounds count from 1, got {server_round}")
        t0 = time.perf_counter()
        start = arrays_to_adapter(global_arrays, self.model, self.config, "secure-global")
        config = replace(self.config, seed=self.config.seed + server_round)
        adapter, losses, epoch_losses = train_lora(self.model, self.hidden, self.blocks, config, "secure",
                                                   start=start)
        report = {"round": server_round, "steps": len(losses), "epoch_losses": [round(x, 4) for x in epoch_losses],
                  "tokens": self.samples, "seconds": round(time.perf_counter() - t0, 2)}
        return adapter_to_arrays(adapter), self.samples, report
