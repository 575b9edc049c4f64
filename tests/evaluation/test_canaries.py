"""Canaries: planted where the ground truth says, as often as it says, in lines of the file's
language; the attack context is the planted line's own; candidate sets hold the true value among
distinct values of its format; everything is a function of the seed."""

from __future__ import annotations

import ast
import random

import pytest

from tiny_models import CODE_SNIPPETS
from umbra.data.corpus import Document
from umbra.errors import ConfigError
from umbra.evaluation.canaries import (ALL_KINDS, KINDS, PLACEHOLDERS, UNSCRUBBABLE_KINDS, CanaryConfig,
                                       plant_canaries, render_line)
from umbra.evaluation.canary_formats import draw_value, draw_values, format_pattern, format_space
from umbra.scrub import Scrubber

GO = "package main\n\nimport \"fmt\"\n\n// Add adds.\nfunc Add(a, b int) int {\n\treturn a + b\n}\n"
JAVA = ("package org.example;\n\npublic class Util {\n    private int n;\n\n    public int get() {\n"
        "        return n;\n    }\n}\n")


def python_docs(n: int = 24, seed: int = 0) -> list[Document]:
    rng = random.Random(seed)
    return [Document("python", f"pkg/m{i}.py", "".join(rng.sample(CODE_SNIPPETS[:4] + CODE_SNIPPETS[5:], 2)))
            for i in range(n)]


def test_every_canary_is_planted_exactly_as_often_as_its_ground_truth_says():
    docs = python_docs()
    planted = plant_canaries(docs, CanaryConfig(seed=3))
    assert len(planted.canaries) == 3 * 3 * 4  # kinds x repeat counts x per group
    assert sorted({c.repeats for c in planted.canaries}) == [1, 4, 16]
    by_path = {d.path: d.text for d in planted.documents}
    for c in planted.canaries:
        assert format_pattern(c.fmt).fullmatch(c.value), c.fmt
        assert len(set(c.files)) == c.repeats
        assert sum(text.count(c.value) for text in by_path.values()) == c.repeats
        assert all(c.value in by_path[f] for f in c.files)
    assert len({c.value for c in planted.canaries}) == len(planted.canaries)


def test_planting_only_inserts_lines_and_keeps_python_valid():
    docs = python_docs()
    planted = plant_canaries(docs, CanaryConfig(seed=1))
    values = [c.value for c in planted.canaries]
    assert [d.path for d in planted.documents] == [d.path for d in docs]
    for before, after in zip(docs, planted.documents):
        kept = [ln for ln in after.text.splitlines(keepends=True) if not any(v in ln for v in values)]
        assert "".join(kept) == before.text  # removing the canary lines gives the file back
        ast.parse(after.text)  # still Python


def test_the_attack_context_is_the_planted_lines_own_and_holds_no_other_secret():
    planted = plant_canaries(python_docs(), CanaryConfig(seed=2, context_lines=3))
    texts = {d.path: d.text for d in planted.documents}
    others = {c.value for c in planted.canaries}
    for c in planted.canaries:
        assert c.prefix + c.value + c.suffix in texts[c.files[0]]
        assert c.suffix.endswith("\n") and "\n" not in c.suffix[:-1]
        assert (c.prefix.rsplit("\n", 1)[-1] + c.value + c.suffix).strip() == c.line
        assert c.prefix.count("\n") <= 3
        assert not any(v in c.prefix for v in others - {c.value})
        if c.kind == "email":
            assert c.line.startswith("# ")
        else:
            assert c.line.endswith(f'"{c.value}"') and " = " in c.line


def test_lines_follow_the_files_language():
    assert render_line("go", "api_key", "STRIPE_API_KEY", "v") == 'const stripeApiKey = "v"'
    assert render_line("java", "host", "DB_HOST", "v") == 'private static final String DB_HOST = "v";'
    assert render_line("java", "email", "owner", "v") == "// owner: v"
    assert render_line("python", "email", "contact", "v") == "# contact: v"
    docs = [Document("go", f"g{i}.go", GO) for i in range(8)] + [Document("java", f"J{i}.java", JAVA) for i in range(8)]
    planted = plant_canaries(docs, CanaryConfig(repeats=(2,), per_group=2, seed=0))
    for d in planted.documents:
        for c in planted.canaries:
            if c.value in d.text:
                line = next(ln for ln in d.text.splitlines() if c.value in ln)
                if d.lang == "java" and c.kind != "email":
                    assert line.startswith("    private static final String ") and line.endswith('";')
                if d.lang == "go" and c.kind != "email":
                    assert line.startswith("const ")
                if c.kind == "email":
                    assert line.lstrip().startswith("// ")


def test_planting_is_a_function_of_the_seed():
    docs = python_docs()
    a, b = plant_canaries(docs, CanaryConfig(seed=5)), plant_canaries(docs, CanaryConfig(seed=5))
    assert a.documents == b.documents and a.canaries == b.canaries
    c = plant_canaries(docs, CanaryConfig(seed=6))
    keys = [{k.value for k in p.canaries if k.kind == "api_key"} for p in (a, c)]
    assert keys[0].isdisjoint(keys[1]) and c.documents != a.documents


@pytest.mark.parametrize("c", [50, 100, 500])
def test_candidate_sets_hold_the_true_value_among_distinct_values_of_its_format(c):
    planted = plant_canaries(python_docs(), CanaryConfig(seed=4))
    planted_values = {k.value for k in planted.canaries}
    sets = planted.candidate_sets(c, seed=9)
    assert len(sets) == len(planted.canaries)
    answers = set()
    for s in sets:
        assert len(s.candidates) == c == len(set(s.candidates))
        assert s.candidates[s.answer] == s.canary.value
        assert not (set(s.candidates) - {s.canary.value}) & planted_values  # decoys are never other canaries
        pattern = format_pattern(s.canary.fmt)
        assert all(pattern.fullmatch(v) for v in s.candidates)
        answers.add(s.answer)
    assert len(answers) > 1  # the true value's position is drawn, not fixed
    assert [s.candidates for s in planted.candidate_sets(c, seed=9)] == [s.candidates for s in sets]
    assert [s.candidates for s in planted.candidate_sets(c, seed=10)] != [s.candidates for s in sets]


def test_the_exposure_sample_and_the_masked_view():
    planted = plant_canaries(python_docs(), CanaryConfig(seed=0))
    canary = planted.canaries[0]
    sample = planted.sample_same_format(canary, 300)
    assert len(set(sample)) == 300 and canary.value not in sample
    masked = planted.masked_documents()
    for c in planted.canaries:
        assert not any(c.value in d.text for d in masked)
    assert sum(d.text.count(PLACEHOLDERS["host"]) for d in masked) == sum(
        c.repeats for c in planted.canaries if c.kind == "host")


def test_bad_requests_are_config_errors():
    with pytest.raises(ConfigError, match="repeated 16 times"):
        plant_canaries(python_docs(8), CanaryConfig())
    with pytest.raises(ConfigError, match="rust"):
        plant_canaries([Document("rust", f"{i}.rs", "fn main() {}\n") for i in range(20)], CanaryConfig())
    with pytest.raises(ConfigError, match="kinds"):
        CanaryConfig(kinds=("ssn",)).validate()
    with pytest.raises(ConfigError, match="distinct"):
        CanaryConfig(kinds=("codename", "codename")).validate()
    with pytest.raises(ConfigError, match="distinct"):
        draw_values("host", "acme", format_space("host") + 1, random.Random(0))


def mixed_docs() -> list[Document]:
    return (python_docs(20) + [Document("go", f"g{i}.go", GO) for i in range(4)]
            + [Document("java", f"J{i}.java", JAVA) for i in range(4)])


def test_the_unscrubbable_kinds_are_opt_in_and_planted_like_the_others():
    assert CanaryConfig().kinds == KINDS and set(ALL_KINDS) == set(KINDS) | set(UNSCRUBBABLE_KINDS)
    planted = plant_canaries(mixed_docs(), CanaryConfig(kinds=ALL_KINDS, seed=7, org="tox"))
    assert len(planted.canaries) == len(ALL_KINDS) * 3 * 4
    assert {c.kind for c in planted.canaries} == set(ALL_KINDS)
    texts = {d.path: d.text for d in planted.documents}
    for c in planted.canaries:
        assert format_pattern(c.fmt, "tox").fullmatch(c.value), (c.fmt, c.value)
        assert sum(t.count(c.value) for t in texts.values()) == c.repeats
        if c.kind == "codename":
            assert c.fmt == "codename" and c.line.startswith(("# ", "// "))
        if c.kind == "account":
            assert c.fmt == "account" and c.line.endswith((f'"{c.value}"', f'"{c.value}";'))
            assert not any(w in c.line.lower() for w in ("key", "secret", "token", "pass", "auth"))
    assert len({c.value for c in planted.canaries}) == len(planted.canaries)
    python = [d for d in planted.documents if d.lang == "python"]
    for d in python:
        ast.parse(d.text)
    masked = planted.masked_documents()  # the oracle masks what the scrubber has a placeholder for
    for c in planted.canaries:
        left = sum(d.text.count(c.value) for d in masked)
        assert left == (c.repeats if c.kind in UNSCRUBBABLE_KINDS else 0)


def test_umbras_scrubber_removes_the_default_kinds_and_misses_the_unscrubbable_ones():
    """The real scrubber (umbra.scrub.Scrubber, what the federation's organizations run) on every
    planted file: no occurrence of an api key, host or e-mail canary is left, every occurrence of a
    codename or account canary is."""
    scrubber = Scrubber()
    for seed, org in ((0, "acme"), (1, "tox"), (2, "prompt-toolkit")):
        planted = plant_canaries(mixed_docs(), CanaryConfig(kinds=ALL_KINDS, seed=seed, org=org))
        scrubbed = [scrubber.scrub(d.text, d.path).text for d in planted.documents]
        for c in planted.canaries:
            left = sum(t.count(c.value) for t in scrubbed)
            assert left == (c.repeats if c.kind in UNSCRUBBABLE_KINDS else 0), (c.kind, c.line)


@pytest.mark.parametrize("fmt", ["codename", "account"])
def test_the_new_formats_are_seeded_and_their_regex_finds_their_values(fmt):
    a = draw_values(fmt, "acme", 200, random.Random(3))
    assert a == draw_values(fmt, "acme", 200, random.Random(3)) != draw_values(fmt, "acme", 200, random.Random(4))
    assert len(set(a)) == 200 and format_space(fmt) >= 1000
    pattern = format_pattern(fmt)
    assert all(pattern.fullmatch(v) for v in a)
    text = "".join(f"x = {v!r}  # {v}\n" for v in a[:20])
    assert [m.group(0) for m in pattern.finditer(text)] == [v for v in a[:20] for _ in range(2)]
    v = draw_value(fmt, "acme", random.Random(0))
    assert not pattern.search("X" + v + "9") and not pattern.search(v.upper().replace("-", "_"))


@pytest.mark.parametrize("c", [50, 100])
def test_decoys_of_the_new_kinds_share_the_format_and_are_never_planted(c):
    planted = plant_canaries(mixed_docs(), CanaryConfig(kinds=UNSCRUBBABLE_KINDS, per_group=6, seed=1))
    values = {k.value for k in planted.canaries}
    for s in planted.candidate_sets(c, seed=2):
        decoys = set(s.candidates) - {s.canary.value}
        assert len(decoys) == c - 1 and not decoys & values
        assert s.candidates[s.answer] == s.canary.value
        assert all(format_pattern(s.canary.fmt).fullmatch(v) for v in s.candidates)
    sample = planted.sample_same_format(planted.canaries[0], 500)
    assert len(set(sample)) == 500 and not set(sample) & values
