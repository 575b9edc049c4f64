"""How well a simulated cloud reconstructed the client's code.

* token recovery rate — position-wise: the share of positions whose guessed public token id
  equals the true one (NOIR's CRT);
* ROUGE-1 (F1 of clipped unigram overlap) and BLEU (geometric mean of clipped n-gram precisions
  times the brevity penalty; n = 1 is NOIR's default, n = 4 the usual corpus setting) of the
  reconstructed *text* against the true text, both over code lexemes (identifiers, numbers and
  single punctuation characters: `\\w+|[^\\w\\s]`), so they do not depend on any tokenizer;
* "clear gist" — NOIR §5.1 counts an attack as winning a prompt when BLEU ≥ τ_BLEU or
  ROUGE-1 ≥ τ_ROUGE. The numeric thresholds did not survive the seed's text extraction; the
  defaults are the bands of the sources NOIR cites: Google Cloud's BLEU guide calls 0.20–0.29
  "the gist is clear" ([47]); ROUGE-1 ≥ 0.5 is the commonly quoted "good overlap" level ([48]).
  Both are fields of GistThresholds, and every report prints the values it used.

In NOIR's security game the reconstruction has the truth's length, so ROUGE-1 precision equals
recall and BLEU-1's brevity penalty is 1: both reduce to the clipped share of right lexemes."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from umbra.errors import ValidationError

_LEXEME = re.compile(r"\w+|[^\w\s]")


@dataclass(frozen=True)
class GistThresholds:
    bleu: float = 0.20  # BLEU (NOIR's default n = 1) at or above which the gist is clear ([47])
    rouge1: float = 0.50  # ROUGE-1 F1 at or above which the gist is clear ([48])


def lexemes(text: str) -> list[str]:
    """Code lexemes: runs of word characters, and every other non-space character alone."""
    return _LEXEME.findall(text)


def token_recovery(guess: Sequence[int] | np.ndarray, truth: Sequence[int] | np.ndarray,
                   mask: np.ndarray | None = None) -> tuple[int, int]:
    """(right, scored) over aligned positions; `mask` (bool) keeps only some positions.
    A guess of -1 means "no guess" and counts as wrong."""
    g, t = np.asarray(guess, dtype=np.int64), np.asarray(truth, dtype=np.int64)
    if g.shape != t.shape:
        raise ValidationError(f"guess and truth must align, got {g.shape} and {t.shape}")
    if mask is not None:
        m = np.asarray(mask, dtype=bool)
        if m.shape != t.shape:
            raise ValidationError("mask must have the truth's shape")
        g, t = g[m], t[m]
    return int((g == t).sum()), int(t.size)


def rouge1(candidate: Sequence[str], reference: Sequence[str]) -> float:
    """ROUGE-1 F1 between two lexeme lists (0 when either is empty)."""
    if not candidate or not reference:
        return 0.0
    overlap = sum((Counter(candidate) & Counter(reference)).values())
    if overlap == 0:
        return 0.0
    p, r = overlap / len(candidate), overlap / len(reference)
    return 2 * p * r / (p + r)


def bleu(candidate: Sequence[str], reference: Sequence[str], max_n: int = 1) -> float:
    """Sentence BLEU-`max_n` (uniform weights, brevity penalty). An n-gram order with no match is
    smoothed to 0.1 / (number of candidate n-grams) (Chen & Cherry's method 1) for n > 1, so one
    missing 4-gram does not zero an otherwise good reconstruction; a zero unigram match is 0."""
    if max_n < 1:
        raise ValidationError("max_n must be >= 1")
    if not candidate or not reference:
        return 0.0
    log_sum = 0.0
    for n in range(1, max_n + 1):
        cand = Counter(tuple(candidate[i : i + n]) for i in range(len(candidate) - n + 1))
        ref = Counter(tuple(reference[i : i + n]) for i in range(len(reference) - n + 1))
        total = sum(cand.values())
        if total == 0:  # candidate shorter than n
            return 0.0
        match = sum((cand & ref).values())
        if match == 0:
            if n == 1:
                return 0.0
            match = 0.1
        log_sum += math.log(match / total) / max_n
    c, r = len(candidate), len(reference)
    bp = 1.0 if c > r else math.exp(1 - r / c)
    return bp * math.exp(log_sum)


@dataclass(frozen=True)
class TextScore:
    rouge1: float
    bleu1: float
    bleu4: float

    def clear_gist(self, thresholds: GistThresholds) -> bool:
        return self.bleu1 >= thresholds.bleu or self.rouge1 >= thresholds.rouge1


def text_score(reconstructed: str, truth: str) -> TextScore:
    cand, ref = lexemes(reconstructed), lexemes(truth)
    return TextScore(rouge1(cand, ref), bleu(cand, ref, 1), bleu(cand, ref, 4))


@dataclass(frozen=True)
class AttackScore:
    """One attack over many sequences: pooled token recovery, mean text scores, gist rate."""

    attack: str
    tokens_right: int
    tokens_scored: int
    rouge1: float  # mean over sequences
    bleu1: float
    bleu4: float
    clear_gist_rate: float  # share of sequences with a clear gist
    sequences: int

    @property
    def recovery(self) -> float:
        return self.tokens_right / self.tokens_scored if self.tokens_scored else float("nan")

    def to_json(self) -> dict:
        return dict(attack=self.attack, recovery=self.recovery, tokens_right=self.tokens_right,
                    tokens_scored=self.tokens_scored, rouge1=self.rouge1, bleu1=self.bleu1, bleu4=self.bleu4,
                    clear_gist_rate=self.clear_gist_rate, sequences=self.sequences)


def aggregate(attack: str, recovery: Sequence[tuple[int, int]], texts: Sequence[TextScore],
              thresholds: GistThresholds) -> AttackScore:
    """Pool per-sequence (right, scored) counts and average per-sequence text scores."""
    right = sum(r for r, _ in recovery)
    scored = sum(s for _, s in recovery)
    n = len(texts)
    mean = (lambda xs: float(np.mean(xs)) if n else float("nan"))
    return AttackScore(
        attack=attack, tokens_right=right, tokens_scored=scored,
        rouge1=mean([t.rouge1 for t in texts]), bleu1=mean([t.bleu1 for t in texts]),
        bleu4=mean([t.bleu4 for t in texts]),
        clear_gist_rate=mean([float(t.clear_gist(thresholds)) for t in texts]), sequences=n,
    )
