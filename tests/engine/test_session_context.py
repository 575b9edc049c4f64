"""Context from open files in the session's prompt: where its ids go in each layout (comment
lines before the prefix without a file separator, `<|file_sep|>` files before the FIM markers
with one), that keystrokes keep reusing them (the prefix cache stays warm), that the same
context gives the same completion in a fresh session, and the budget it may take."""

from __future__ import annotations

import pytest

from tiny_models import CODE_SNIPPETS, build_tiny_model_dir
from umbra.engine import ClientModel, CompletionEngine, EngineConfig, PromptConfig, StopConfig
from umbra.engine.context import RepoContext, Snippet, render_comments
from umbra.middle.local import LocalMiddle

FILE = "".join(CODE_SNIPPETS)
CURSOR = FILE.index("    return a + b") + len("    return ")
PREFIX, SUFFIX = FILE[:CURSOR], FILE[CURSOR:]
CFG = EngineConfig(prompt=PromptConfig(budget=256, token_healing=False),
                   stop=StopConfig(max_tokens=4, multiline=True, stop_at_block_end=False))
CONTEXT = RepoContext("pkg/main.py", "python", (Snippet("pkg/util.py", "def add(a, b):\n    return a + b\n"),
                                               Snippet("pkg/geo.py", "def area(r):\n    return 3 * r * r\n")), 96)


def find(ids: list[int], part: list[int]) -> int:
    return next((i for i in range(len(ids) - len(part) + 1) if ids[i:i + len(part)] == part), -1)


@pytest.fixture(scope="module")
def qwen_model(tmp_path_factory) -> ClientModel:
    d = tmp_path_factory.mktemp("tiny-qwen-fim")
    build_tiny_model_dir(d, style="qwen")
    return ClientModel.load(d)


async def test_comment_layout_sits_before_the_prefix_and_stays_cached_while_typing(client_model, local_middle):
    engine = CompletionEngine.split(client_model, local_middle, CFG)
    async with engine.session() as plain:
        without = await plain.complete(PREFIX, SUFFIX)
    async with engine.session() as s:
        first = await s.complete(PREFIX, SUFFIX, context=CONTEXT)
        lead = s.tokenizer.encode("".join(render_comments(x, "python") for x in CONTEXT.snippets))
        mid = s.fim.middle_id
        assert s._cached[s._cached.index(mid) + 1:][:len(lead)] == lead  # SPM: ... MID context prefix
        assert without.prompt_tokens <= first.prompt_tokens <= 256 + 4  # the context comes out of the budget
        assert first.context_files == ("pkg/util.py", "pkg/geo.py")
        for typed in ("a", "a ", "a +"):
            r = await s.complete(PREFIX + typed, SUFFIX, context=CONTEXT)
            assert r.recomputed_tokens <= 4, (typed, r.recomputed_tokens)  # the context is never re-run
        again = await s.complete(PREFIX, SUFFIX, context=CONTEXT)
    async with engine.session() as fresh:
        ref = await fresh.complete(PREFIX, SUFFIX, context=CONTEXT)
    assert ref.tokens == again.tokens == first.tokens and ref.reused_tokens == 0


async def test_repository_layout_heads_the_prompt_with_file_separators(qwen_model):
    engine = CompletionEngine.split(qwen_model, LocalMiddle(qwen_model.load_middle()), CFG)
    async with engine.session() as s:
        first = await s.complete(PREFIX, SUFFIX, context=CONTEXT)
        sep, enc = s.tokenizer.token_id("<|file_sep|>"), s.tokenizer.encode
        head = [sep, *enc("pkg/util.py\n"), *enc(CONTEXT.snippets[0].text),
                sep, *enc("pkg/geo.py\n"), *enc(CONTEXT.snippets[1].text), sep, *enc("pkg/main.py\n")]
        assert s._cached[:len(head)] == head and s._cached[len(head)] == s.fim.prefix_id
        second = await s.complete(PREFIX + "a", SUFFIX, context=CONTEXT)  # PSM: the suffix re-runs, not the context
        assert second.reused_tokens >= len(head) and first.context_files == second.context_files


async def test_the_context_takes_at_most_its_budget_and_half_the_prompt(client_model, local_middle):
    engine = CompletionEngine.split(client_model, local_middle, CFG)
    big = RepoContext("m.py", "python", tuple(Snippet(f"f{i}.py", FILE[:120]) for i in range(6)), 10_000)
    async with engine.session() as s:
        r = await s.complete(PREFIX, SUFFIX, context=big)
        head, lead, files = s._context_ids(big, 256)
        assert not head and 0 < len(lead) <= 128 and 0 < len(files) < 6
        assert files == tuple(x.path for x in big.snippets[-len(files):])  # the least relevant dropped first
        assert r.prompt_tokens <= 256 + 4 and r.context_files == files
        empty = await s.complete(PREFIX, SUFFIX, context=RepoContext("m.py", "python", (), 100))
        assert empty.context_files == ()
        long = RepoContext("m.py", "python", (Snippet("a.py", "x = 1\n"), Snippet("long.py", FILE)), 40)
        head, lead, files = s._context_ids(long, 256)  # the most relevant alone is too long: its top lines
        assert files == ("long.py",) and 0 < len(lead) <= 40
        assert s.tokenizer.decode(list(lead)).startswith("# Path: long.py\n# " + FILE.split("\n")[0])
