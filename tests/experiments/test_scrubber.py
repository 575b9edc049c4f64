"""experiments/scrubber.py: the canaries are what they claim (each value stands in its lines, every
kind has a generator) and the judge can fail — a scrubber that finds nothing catches nothing."""

import random

import pytest

from experiments.scrub_canaries import GENERATORS, OUTSIDE
from experiments.scrub_lines import LANGS, ORG_DOMAIN, Canary
from experiments.scrubber import canary_config_name, judge
from umbra.scrub import KINDS, ScrubConfig, Scrubber

HOST_LINES = ["import os", "", "def main():", "    return 0"]


@pytest.mark.parametrize("kind", sorted(GENERATORS) + sorted(OUTSIDE))
def test_each_canary_value_stands_in_its_lines(kind):
    rng = random.Random(3)
    gen = GENERATORS.get(kind) or OUTSIDE[kind]
    for i in range(30):
        canary = gen(rng, LANGS[i % 3])
        assert isinstance(canary, Canary) and canary.kind == kind and canary.expected in KINDS
        block = "\n".join(canary.lines)
        assert canary.values and all(v and v in block for v in canary.values)


def _judged(scrubber: Scrubber, canary: Canary, name: str) -> tuple[bool, bool]:
    at = 2
    text = "\n".join(HOST_LINES[:at] + canary.lines + HOST_LINES[at:]) + "\n"
    return judge(text, canary, at, HOST_LINES, scrubber.scrub(text, path=name))


def test_the_judge_passes_a_caught_canary_and_fails_a_missed_one():
    rng = random.Random(5)
    everything = Scrubber(ScrubConfig(internal_domains=(ORG_DOMAIN,)))
    nothing = Scrubber(ScrubConfig(kinds=frozenset()))
    for kind, gen in GENERATORS.items():
        canary = gen(rng, "python")
        name = canary_config_name(canary, "x") if kind == "password in config" else "f.py"
        assert _judged(everything, canary, name) == (True, True), kind
        assert _judged(nothing, canary, name) == (False, False), kind


def test_the_wrong_placeholder_is_gone_but_not_caught():
    canary = Canary("test", ['KEY = "AKIAQ3EGT2ZJW6PXMN4R"'], ["AKIAQ3EGT2ZJW6PXMN4R"], "host")
    assert _judged(Scrubber(), canary, "f.py") == (False, True)
