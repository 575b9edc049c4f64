"""TypeAhead: typing the first characters of a kept completion gives its rest; anything else —
nothing typed, everything typed, another character, an edit before the cursor or after it, another
config or language — does not; entries and keys are bounded, most recently used kept."""

from __future__ import annotations

import pytest

from lsp.typeahead import TypeAhead
from umbra.engine import CompletionResult, EngineConfig, StopConfig

PREFIX, SUFFIX = "def add(a, b):\n    total = a + b\n    ", "\n\nprint(add(1, 2))\n"


def shown(text: str) -> CompletionResult:
    return CompletionResult(text=text, tokens=(5, 6, 7), stop_reason="newline", prompt_tokens=30, reused_tokens=20,
                            recomputed_tokens=10, template="starcoder", prefill_seconds=0.01, decode_seconds=0.02,
                            language="python", expert="python", access="secure")


def test_typing_into_the_completion_gives_its_rest_as_a_request_that_ran_nothing():
    ta = TypeAhead()
    ta.remember("doc", PREFIX, SUFFIX, shown("return total"))
    for typed in ("r", "ret", "return tota"):
        hit = ta.lookup("doc", PREFIX + typed, SUFFIX)
        assert hit.text == "return total"[len(typed):]
        assert (hit.tokens, hit.prompt_tokens, hit.reused_tokens, hit.recomputed_tokens) == ((), 0, 0, 0)
        assert (hit.prefill_seconds, hit.decode_seconds, hit.evicted) == (0.0, 0.0, False)
        assert (hit.stop_reason, hit.template, hit.language, hit.expert, hit.access) == (
            "newline", "starcoder", "python", "python", "secure")


@pytest.mark.parametrize("prefix, suffix", [
    (PREFIX, SUFFIX),  # nothing typed: the same request again decodes
    (PREFIX + "return total", SUFFIX),  # all of it typed: nothing left to show
    (PREFIX + "return totals", SUFFIX),  # past its end
    (PREFIX + "x", SUFFIX),  # another character
    (PREFIX + "retu", SUFFIX + ")"),  # the suffix changed (an auto-closed bracket)
    ("#" + PREFIX[1:] + "retu", SUFFIX),  # a character replaced before the cursor, then typing
    (PREFIX.replace("total", "tota", 1) + " retu", SUFFIX),  # a character deleted, then typing
    (PREFIX[:-4] + "r", SUFFIX),  # the cursor went back
])
def test_anything_but_typing_its_first_characters_is_a_miss(prefix, suffix):
    ta = TypeAhead()
    ta.remember("doc", PREFIX, SUFFIX, shown("return total"))
    assert ta.lookup("doc", prefix, suffix) is None
    assert ta.lookup("other", PREFIX + "r", SUFFIX) is None  # another document


def test_another_config_or_language_is_a_miss_and_empty_completions_are_not_kept():
    ta = TypeAhead()
    short = EngineConfig(stop=StopConfig(max_tokens=8))
    ta.remember("doc", PREFIX, SUFFIX, shown("return total"), config=short, language="python")
    assert ta.lookup("doc", PREFIX + "r", SUFFIX, config=short, language="python").text == "eturn total"
    assert ta.lookup("doc", PREFIX + "r", SUFFIX, config=None, language="python") is None
    assert ta.lookup("doc", PREFIX + "r", SUFFIX, config=EngineConfig(stop=StopConfig(max_tokens=8)),
                     language="python").text == "eturn total"  # equal configs match
    assert ta.lookup("doc", PREFIX + "r", SUFFIX, config=short, language="go") is None
    ta.remember("doc", PREFIX + "x", SUFFIX, shown(""))
    assert len(ta) == 1


def test_earlier_completions_of_the_document_still_serve_and_the_bounds_hold():
    ta = TypeAhead(per_key=2, max_keys=2)
    ta.remember("doc", PREFIX, SUFFIX, shown("return total"))
    ta.remember("doc", PREFIX + "print(", SUFFIX, shown("total)"))  # the user went on elsewhere
    assert ta.lookup("doc", PREFIX + "re", SUFFIX).text == "turn total"  # the older entry, now the most recent
    ta.remember("doc", PREFIX + "pass", SUFFIX, shown("  # nothing"))  # drops the least recently used
    assert ta.lookup("doc", PREFIX + "print(t", SUFFIX) is None
    assert ta.lookup("doc", PREFIX + "ret", SUFFIX).text == "urn total"
    ta.remember("doc", PREFIX, SUFFIX, shown("return a + b"))  # the same request again replaces its entry
    assert ta.lookup("doc", PREFIX + "return a", SUFFIX).text == " + b" and len(ta) == 2
    ta.remember("b", PREFIX, SUFFIX, shown("x"))
    ta.remember("c", PREFIX, SUFFIX, shown("yz"))  # a third document: the least recently used one goes
    assert ta.lookup("doc", PREFIX + "r", SUFFIX) is None and ta.lookup("c", PREFIX + "y", SUFFIX).text == "z"
    ta.forget("c")
    assert ta.lookup("c", PREFIX + "y", SUFFIX) is None and len(ta) == 1  # "b"'s entry


def test_bounds_must_be_positive():
    with pytest.raises(ValueError):
        TypeAhead(per_key=0)
    with pytest.raises(ValueError):
        TypeAhead(max_keys=0)
