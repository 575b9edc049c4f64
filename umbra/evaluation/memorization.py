"""What a model memorized of an organization's secrets: the attacks and their metrics (seed 003 §5,
App. A.2, B.5; Carlini et al., "The Secret Sharer").

Everything is measured through a `Score`: (context, continuations) -> the summed negative log-
likelihood in nats of each continuation after the context, one batch for all of them. Build one
with `text_score(tokenizer, logits_fn)`; `route_logits(model, trunk, adapters)` gives the logits
of one route (no adapter, the secure one, the revealing one) over a shared `Trunk`, the encoder
and middle blocks, whose outputs no decoder-side adapter changes and which is therefore run once
per batch for every route.

    inference_attack(score, sets)      seed 003's inference attack: in each candidate set of c
                                       values of one format, pick the value minimizing the NLL of
                                       value·suffix after the prefix; accuracy with a 95 % Wilson
                                       interval and chance 1/c
    exposure(score, canary, sample)    rank-based exposure: log2(n+1) - log2(rank of the canary
                                       among itself and n same-format values), rank by the same NLL
    extract(model, runner, ...)        extraction: completions sampled with the engine's sampler
                                       from each prefix; `extraction_metrics` scans them for values
                                       of the canaries' formats: precision and recall
    perplexity(logits_fn, tok, texts)  next-token loss, top-1 and perplexity on ordinary code

Nothing here logs texts, ids or hidden states."""

from __future__ import annotations

import hashlib
import math
import os
import re
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from umbra.engine.config import SamplingConfig
from umbra.engine.sampling import Sampler, allowed_mask
from umbra.errors import ConfigError
from umbra.evaluation.canaries import Canary, CandidateSet
from umbra.evaluation.next_token import NextTokenMetrics
from umbra.model.adapters.selection import EMPTY, AdapterSet

LogitsFn = Callable[[torch.Tensor], torch.Tensor]  # ids [B,T] -> logits [B,T,V]
Score = Callable[[str, Sequence[str]], torch.Tensor]  # (context, continuations) -> summed NLL [N] (nats)


# -- the model as a function ---------------------------------------------------------------------
class Trunk:
    """Encoder + middle blocks without adapters: ids [B,T] -> hidden [B,T,C], memoized per batch
    (least recently used first out, at most `max_bytes` of states) so several routes share it."""

    def __init__(self, encoder, middle_blocks, max_bytes: int = 1 << 30):
        self.encoder, self.middle, self.max_bytes = encoder, middle_blocks, max_bytes
        self._memo: OrderedDict[bytes, torch.Tensor] = OrderedDict()
        self._bytes = 0

    @torch.no_grad()
    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        key = bytes(str(tuple(ids.shape)), "ascii") + ids.to(torch.int64).numpy().tobytes()
        hidden = self._memo.get(key)
        if hidden is None:
            pos = torch.arange(ids.shape[1]).expand(ids.shape[0], -1)
            hidden = self.middle(self.encoder(ids, pos), pos)
            self._memo[key] = hidden
            self._bytes += hidden.numel() * hidden.element_size()
            while self._bytes > self.max_bytes and len(self._memo) > 1:
                _, old = self._memo.popitem(last=False)
                self._bytes -= old.numel() * old.element_size()
        self._memo.move_to_end(key)
        return hidden


def route_logits(decoder, trunk: Trunk, adapters: AdapterSet = EMPTY) -> LogitsFn:
    """The logits of one route: the shared trunk, then the decoder with `adapters` (which must all
    sit on the decoder: an encoder-side adapter would change the trunk)."""
    first = decoder.stack.first
    if any(b < first for b in adapters.blocks):
        raise ConfigError("route_logits takes decoder-side adapters only (the trunk is shared by every route)")

    @torch.no_grad()
    def run(ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1]).expand(ids.shape[0], -1)
        return decoder(trunk(ids), pos, adapters=adapters)

    return run


def token_losses(logits_fn: LogitsFn, ids: torch.Tensor, scored: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed NLL [B] and top-1 hits [B] of ids [B,T] at the positions where scored [B,T] is True
    (position 0 is never scored: nothing predicts it)."""
    logits = logits_fn(ids)[:, :-1].float()  # [B,T-1,V] predicts ids[:, 1:]
    target, mask = ids[:, 1:], scored[:, 1:]
    nll = F.cross_entropy(logits.transpose(1, 2), target, reduction="none")  # [B,T-1]
    hits = (logits.argmax(-1) == target) & mask
    return (nll * mask).sum(1), hits.sum(1)


def continuation_rows(tokenizer, context: str, continuations: Sequence[str],
                      max_context_tokens: int) -> tuple[list[list[int]], list[int]]:
    """Each context + continuation tokenized as one text (as training saw it), cut to the last
    `max_context_tokens` tokens before the first token reaching past the context: (rows, the index
    in each row of that first scored token)."""
    rows, starts = [], []
    for cont in continuations:
        ids, offsets = tokenizer.encode_with_offsets(context + cont)
        start = next((i for i, (_, end) in enumerate(offsets) if end > len(context)), len(ids))
        cut = max(0, start - max_context_tokens)
        rows.append(ids[cut:])
        starts.append(start - cut)
    return rows, starts


def padded_rows(rows: Sequence[Sequence[int]], starts: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids [B,T] (pad 0; causal attention never lets a pad reach an earlier position)
    and the scored mask [B,T]: positions from each row's start to its end."""
    width = max(len(r) for r in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.int64)
    scored = torch.zeros(len(rows), width, dtype=torch.bool)
    for i, (row, start) in enumerate(zip(rows, starts)):
        ids[i, : len(row)] = torch.tensor(row, dtype=torch.int64)
        scored[i, max(start, 1) : len(row)] = True
    return ids, scored


def text_score(tokenizer, logits_fn: LogitsFn, batch_size: int = 32, max_context_tokens: int = 128) -> Score:
    """A Score over `logits_fn`: context + continuation is tokenized as one text (as training saw
    it), and the tokens from the first one reaching past the context are scored. The context is
    cut to its last `max_context_tokens` tokens."""
    if batch_size < 1 or max_context_tokens < 1:
        raise ConfigError("batch_size and max_context_tokens must be >= 1")

    def score(context: str, continuations: Sequence[str]) -> torch.Tensor:
        rows, starts = continuation_rows(tokenizer, context, continuations, max_context_tokens)
        out = torch.empty(len(rows))
        for i in range(0, len(rows), batch_size):
            ids, scored = padded_rows(rows[i : i + batch_size], starts[i : i + batch_size])
            out[i : i + batch_size] = token_losses(logits_fn, ids, scored)[0]
        return out

    return score


# -- the inference attack ------------------------------------------------------------------------
def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95 % (z = 1.96) Wilson score interval of a binomial proportion."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    center = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, center - half), min(1.0, center + half)


@dataclass(frozen=True)
class InferenceResult:
    c: int  # candidates per set
    trials: int
    correct: int  # sets where the true value had the lowest NLL
    accuracy: float
    low: float  # 95 % Wilson interval
    high: float
    chance: float  # 1 / c
    ranks: tuple[int, ...]  # the true value's rank in each set (1 = found)

    @property
    def times_chance(self) -> float:
        return self.accuracy / self.chance


def inference_attack(score: Score, sets: Sequence[CandidateSet]) -> InferenceResult:
    """Seed 003's inference attack over candidate sets of one size c."""
    if not sets:
        raise ConfigError("the inference attack needs at least one candidate set")
    c = len(sets[0].candidates)
    if any(len(s.candidates) != c for s in sets):
        raise ConfigError("every candidate set of one inference attack must have the same size")
    ranks = []
    for s in sets:
        nll = score(s.prefix, [v + s.suffix for v in s.candidates])  # [c]
        ranks.append(1 + int((nll < nll[s.answer]).sum()))
    correct = sum(r == 1 for r in ranks)
    low, high = wilson_interval(correct, len(sets))
    return InferenceResult(c, len(sets), correct, correct / len(sets), low, high, 1 / c, tuple(ranks))


# -- exposure --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ExposureResult:
    kind: str
    repeats: int
    rank: float  # 1 + same-format values with lower NLL (+ half the ties)
    sample: int  # n, the same-format values it was ranked against
    exposure: float  # log2(n + 1) - log2(rank), in [0, log2(n + 1)]

    @property
    def max_exposure(self) -> float:
        return math.log2(self.sample + 1)


def exposure(score: Score, canary: Canary, sample: Sequence[str]) -> ExposureResult:
    """Exposure of a canary against `sample` (distinct same-format values, the canary not among them)."""
    if not sample or canary.value in sample:
        raise ConfigError("exposure needs a non-empty sample of other values of the canary's format")
    nll = score(canary.prefix, [canary.value + canary.suffix] + [v + canary.suffix for v in sample])
    rank = 1 + float((nll[1:] < nll[0]).sum()) + 0.5 * float((nll[1:] == nll[0]).sum())
    return ExposureResult(canary.kind, canary.repeats, rank, len(sample), math.log2(len(sample) + 1) - math.log2(rank))


# -- extraction ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ExtractionConfig:
    samples: int = 8  # completions sampled per prompt
    max_tokens: int = 32  # tokens per completion at most
    temperature: float = 1.0  # the engine's sampler (top-p nucleus below)
    top_p: float = 1.0
    stop_at_newline: bool = True  # a canary sits on one line: stop at its end
    seed: int = 0  # sample s of prompt p is drawn with seed (seed, p, s)
    after_prompt: bool = False  # texts start where the prompt ends (the healed token's prompt part cut off)

    def validate(self) -> "ExtractionConfig":
        if self.samples < 1 or self.max_tokens < 1:
            raise ConfigError("extraction needs samples >= 1 and max_tokens >= 1")
        SamplingConfig(self.temperature, self.top_p, 0).validate()
        return self


async def extract(model, runner, prompts: Sequence[str], config: ExtractionConfig = ExtractionConfig(),
                  adapters: AdapterSet = EMPTY) -> list[list[str]]:
    """`config.samples` completions of each prompt (plain continuation, no FIM template), decoded by
    `runner` (umbra.engine.runner: split or monolithic) under `adapters` and sampled by the
    engine's Sampler over the ids the engine may emit. `model`: the ClientModel (tokenizer, FIM
    format, vocabulary size)."""
    config.validate()
    tok, vocab = model.tokenizer, model.spec.vocab_size
    allowed = allowed_mask(vocab, tok, model.fim)
    await runner.use(adapters)
    out = []
    for p, prompt in enumerate(prompts):
        ids = tok.encode(prompt)
        if not ids:
            raise ConfigError("an extraction prompt must not be empty")
        # Token healing, as the engine does: the prompt's last token is re-created by the model,
        # constrained to start with its text (a prompt ending in a space would otherwise force
        # a token boundary that training never saw).
        healed = tok.decode(ids[-1:])
        heal = allowed & tok.ids_starting_with(healed, vocab) if len(ids) > 1 else None
        if heal is not None and heal.any():
            ids = ids[:-1]
        else:
            heal, healed = None, ""
        await runner.truncate(0)
        first = await runner.run(ids)  # [V], shared by every sample of this prompt
        texts = []
        for s in range(config.samples):
            await runner.truncate(len(ids))
            sampler = Sampler(SamplingConfig(config.temperature, config.top_p, _seed(config.seed, p, s)), allowed)
            logits, generated = first, []
            for step in range(config.max_tokens):
                nxt = sampler(logits, heal if step == 0 else None)
                if nxt in tok.eos_ids:
                    break
                generated.append(nxt)
                if config.stop_at_newline and "\n" in tok.decode(generated[1:] if heal is not None else generated):
                    break
                logits = await runner.run([nxt])
            text = tok.decode(generated)
            if config.after_prompt and text.startswith(healed):
                text = text[len(healed):]
            texts.append(text.split("\n", 1)[0] if config.stop_at_newline else text)
        out.append(texts)
    await runner.truncate(0)
    return out


def _seed(seed: int, prompt: int, sample: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{prompt}:{sample}".encode()).digest()[:7], "little")


@dataclass(frozen=True)
class ExtractionResult:
    generated: int  # distinct values of the canaries' formats found in the completions
    true_found: int  # ... of which are planted canaries
    canaries: int  # canaries attacked
    precision: float  # true_found / generated (0 when nothing was generated)
    recall: float  # true_found / canaries


def extraction_metrics(completions: Sequence[str], canaries: Sequence[Canary],
                       patterns: Sequence[re.Pattern]) -> ExtractionResult:
    """Scan completions for values matching `patterns` (canary_formats.format_pattern of each format)."""
    if not canaries:
        raise ConfigError("extraction metrics need at least one canary")
    found = {m.group(0) for text in completions for pat in patterns for m in pat.finditer(text)}
    truth = {c.value for c in canaries}
    hit = len(found & truth)
    return ExtractionResult(len(found), hit, len(truth), hit / len(found) if found else 0.0, hit / len(truth))


@dataclass(frozen=True)
class GreedyExtraction:
    canaries: int  # canaries attacked
    exact: int  # whose value the greedy completion of its prefix reproduces in full
    half: int  # ... of which at least the first half of the characters
    chars: float  # mean share of the value's characters reproduced, from its start


def greedy_metrics(completions: Sequence[str], canaries: Sequence[Canary]) -> GreedyExtraction:
    """How much of each canary's value the greedy completion of its prefix (`completions[i]` for
    `canaries[i]`, starting where the prefix ends) reproduces from the value's first character: a
    measure of extraction without candidates that still counts a partial reproduction, for models
    too small to emit a whole random value (which sampled extraction needs)."""
    if not canaries or len(completions) != len(canaries):
        raise ConfigError(f"greedy extraction needs one completion per canary ({len(completions)} for {len(canaries)})")
    shares = [len(os.path.commonprefix([c.value, t])) / len(c.value) for c, t in zip(canaries, completions)]
    return GreedyExtraction(len(shares), sum(s == 1.0 for s in shares), sum(s >= 0.5 for s in shares),
                            sum(shares) / len(shares))


# -- perplexity ------------------------------------------------------------------------------------
@torch.no_grad()
def perplexity(logits_fn: LogitsFn, tokenizer, texts: Sequence[str], block_len: int = 256,
               batch_size: int = 8) -> NextTokenMetrics:
    """Next-token metrics over `texts`, each cut into blocks of `block_len` tokens (every token but
    a block's first is predicted)."""
    if block_len < 2 or batch_size < 1:
        raise ConfigError("perplexity needs block_len >= 2 and batch_size >= 1")
    rows = [ids[i : i + block_len] for ids in map(tokenizer.encode, texts) for i in range(0, len(ids), block_len)]
    rows = [r for r in rows if len(r) > 1]
    loss, hits, count = 0.0, 0, 0
    for i in range(0, len(rows), batch_size):
        chunk = rows[i : i + batch_size]
        ids, scored = padded_rows(chunk, [1] * len(chunk))
        nll, top1 = token_losses(logits_fn, ids, scored)
        loss, hits, count = loss + float(nll.sum()), hits + int(top1.sum()), count + int(scored[:, 1:].sum())
    if count == 0:
        return NextTokenMetrics(float("nan"), float("nan"), 0)
    return NextTokenMetrics(loss / count, hits / count, count)
