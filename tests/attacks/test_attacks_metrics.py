"""Attack metrics: code lexemes, ROUGE-1, BLEU (brevity penalty, smoothing), token recovery,
NOIR's clear-gist rule — checked against values worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from umbra.attacks.metrics import (
    GistThresholds, TextScore, aggregate, bleu, lexemes, rouge1, text_score, token_recovery,
)
from umbra.errors import ValidationError


def test_lexemes_split_words_and_single_punctuation():
    assert lexemes("def f(x):\n    return x+1  # ok") == [
        "def", "f", "(", "x", ")", ":", "return", "x", "+", "1", "#", "ok"]
    assert lexemes("   \n\t") == []


def test_rouge1_is_the_f1_of_clipped_unigram_overlap():
    cand, ref = ["a", "a", "b", "c"], ["a", "b", "b", "d", "e"]
    # clipped overlap: a:min(2,1)=1, b:min(1,2)=1 -> 2; P = 2/4, R = 2/5
    p, r = 0.5, 0.4
    assert rouge1(cand, ref) == pytest.approx(2 * p * r / (p + r))
    assert rouge1(ref, ref) == 1.0
    assert rouge1([], ref) == rouge1(cand, []) == rouge1(["x"], ["y"]) == 0.0


def test_bleu1_has_a_brevity_penalty_and_equals_precision_at_equal_length():
    ref = ["a", "b", "c", "d"]
    assert bleu(["a", "b", "x", "y"], ref) == pytest.approx(0.5)  # equal length: BP = 1
    short = ["a", "b"]  # precision 1, BP = exp(1 - 4/2)
    assert bleu(short, ref) == pytest.approx(math.exp(-1))
    assert bleu(["x", "y", "z", "w"], ref) == 0.0


def test_bleu4_perfect_and_smoothed():
    ref = "def add ( a , b ) : return a + b".split()
    assert bleu(ref, ref, 4) == pytest.approx(1.0)
    cand = ["def", "add", "(", "b", ",", "a", ")", ":", "return", "b", "+", "a"]
    # clipped matches: 1-grams 12/12; 2-grams def-add, add-(, )-:, :-return = 4/11;
    # 3-grams def-add-(, )-:-return = 2/10; 4-grams none -> smoothed 0.1/9; equal length: BP = 1
    expected = math.exp((math.log(1) + math.log(4 / 11) + math.log(2 / 10) + math.log(0.1 / 9)) / 4)
    assert bleu(cand, ref, 4) == pytest.approx(expected)
    no_4gram = "a b c x a b c".split()  # shares 1-, 2- and 3-grams with ref2 but no 4-gram
    ref2 = "a b c y a b".split()
    value = bleu(no_4gram, ref2, 4)
    assert 0 < value < bleu(no_4gram, ref2, 3)  # smoothed, not zero
    with pytest.raises(ValidationError):
        bleu(ref, ref, 0)


def test_token_recovery_counts_positions_and_treats_minus_one_as_wrong():
    truth = np.array([5, 6, 7, 8])
    assert token_recovery([5, 0, 7, -1], truth) == (2, 4)
    assert token_recovery([5, 0, 7, -1], truth, np.array([True, True, False, False])) == (1, 2)
    with pytest.raises(ValidationError):
        token_recovery([1, 2], truth)


def test_clear_gist_uses_either_threshold_and_aggregate_pools_tokens():
    g = GistThresholds(bleu=0.2, rouge1=0.5)
    assert TextScore(rouge1=0.1, bleu1=0.2, bleu4=0.0).clear_gist(g)
    assert TextScore(rouge1=0.5, bleu1=0.0, bleu4=0.0).clear_gist(g)
    assert not TextScore(rouge1=0.49, bleu1=0.19, bleu4=0.9).clear_gist(g)
    same = text_score("return a + b", "return a + b")
    assert same.rouge1 == same.bleu1 == 1.0
    s = aggregate("x", [(1, 4), (3, 4)], [same, TextScore(0.0, 0.0, 0.0)], g)
    assert s.recovery == 0.5 and s.rouge1 == 0.5 and s.clear_gist_rate == 0.5 and s.sequences == 2
