"""umbra/engine/decoding.py: a request's deadline is a target. Past it, `Continuation.take` ends
the completion at the first token after which the text, cut short, shows a whole word or line
(what `end("deadline")` answers is not empty), and once the grace (`StopConfig.deadline_grace`)
has passed too, at the next token whatever it holds; before the deadline nothing changes. Token
ids of the tiny model's real tokenizer, fed one text piece at a time; the deadlines lie far in
the past or the future, so no outcome depends on how fast the machine is."""

from __future__ import annotations

import time

import pytest
import torch

from umbra.engine.config import EngineConfig, StopConfig
from umbra.engine.decoding import Continuation

PREFIX, SUFFIX = "def total(values):\n    return", "\n"
# `return| values[0]`: no whole word until the bracket after "values"
PIECES = [" ", "va", "lue", "s", "[", "0", "]"]
FAR = 3600.0


def _continuation(client_model, deadline: float | None, grace: float, multiline: bool | str = False,
                  prefix: str = PREFIX, suffix: str = SUFFIX) -> Continuation:
    cfg = EngineConfig(stop=StopConfig(multiline=multiline, deadline_grace=grace))
    allowed = torch.ones(client_model.spec.vocab_size, dtype=torch.bool)
    return Continuation(client_model.tokenizer, frozenset(), allowed, "", prefix, suffix, cfg, None, deadline)


def _take_pieces(cont: Continuation, pieces: list[str]) -> tuple[int | None, str | None]:
    """Feed the pieces' ids; (index of the piece whose last id ended the completion, its reason)."""
    for i, piece in enumerate(pieces):
        for token in cont.tokenizer.encode(piece):
            reason = cont.take(token)
            if reason is not None:
                return i, reason
    return None, None


def test_past_the_deadline_decoding_goes_on_to_the_first_whole_word(client_model):
    cont = _continuation(client_model, deadline=time.monotonic() - 1, grace=FAR)
    at, reason = _take_pieces(cont, PIECES)
    assert (at, reason) == (4, "deadline")  # " values[": " values" is whole; " valu..." never was
    assert cont.end(reason) == " values"


def test_without_grace_the_deadline_cuts_at_once(client_model):
    cont = _continuation(client_model, deadline=time.monotonic() - 1, grace=0.0)
    at, reason = _take_pieces(cont, PIECES)
    assert (at, reason) == (0, "deadline") and cont.end(reason) == ""


def test_the_grace_bounds_the_wait_for_a_word(client_model):
    cont = _continuation(client_model, deadline=time.monotonic() - 10, grace=5.0)  # both passed
    at, reason = _take_pieces(cont, PIECES)
    assert (at, reason) == (0, "deadline") and cont.end(reason) == ""


def test_before_the_deadline_nothing_changes(client_model):
    ahead = _continuation(client_model, deadline=time.monotonic() + FAR, grace=FAR)
    none = _continuation(client_model, deadline=None, grace=FAR)
    assert _take_pieces(ahead, PIECES + ["\n"]) == _take_pieces(none, PIECES + ["\n"]) == (7, "newline")
    assert ahead.end("newline") == none.end("newline") == " values[0]"


def test_text_already_whole_at_the_deadline_stops_there(client_model):
    cont = _continuation(client_model, deadline=time.monotonic() - 1, grace=FAR)
    assert _take_pieces(cont, [" total", "("]) == (1, "deadline")
    assert cont.end("deadline") == " total"


@pytest.mark.parametrize("pieces, shown", [
    ([" f'<{", "pa", "th", "}", ">'", "\n"], " f"),       # never inside `{path}`: the word before the quote
    ([" (", "a", " +", " b", ")", " *", " 2"], " (a + b)"),  # the bracket closed, then a word
])
def test_the_first_cut_never_leaves_a_run_open(client_model, pieces, shown):
    cont = _continuation(client_model, deadline=time.monotonic() - 1, grace=FAR)
    at, reason = _take_pieces(cont, pieces)
    assert reason == "deadline" and cont.end(reason) == shown


def test_a_block_waits_for_its_first_line(client_model):
    """At a blank line (a block): the first whole word ends it, or the first whole line."""
    prefix, suffix = "def total(values):\n    ", "\n"
    cont = _continuation(client_model, deadline=time.monotonic() - 1, grace=FAR, multiline="auto",
                         prefix=prefix, suffix=suffix)
    at, reason = _take_pieces(cont, ["for", " v", " in", " values", ":\n", "        "])
    assert (at, reason) == (1, "deadline") and cont.end(reason) == "for"
