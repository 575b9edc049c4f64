"""FIM templates: detection from special tokens, prompt layout, the prefix-weighted budget and
the stable prefix cut that keeps consecutive prompts sharing a prefix."""

from __future__ import annotations

import pytest

from tiny_models import CODE_SNIPPETS, build_tiny_tokenizer
from umbra.engine.config import PromptConfig
from umbra.engine.fim import build_prompt, detect_format, split_fim_text
from umbra.engine.tokenizer import ClientTokenizer
from umbra.errors import ConfigError


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory) -> dict[str, ClientTokenizer]:
    out = {}
    for style in ("starcoder", "qwen", "codellama", "plain"):
        d = tmp_path_factory.mktemp(f"tok-{style}")
        build_tiny_tokenizer(d, style)
        out[style] = ClientTokenizer.from_dir(d)
    return out


LONG_FILE = "".join(CODE_SNIPPETS * 3)  # ~70 lines, several hundred tokens


@pytest.mark.parametrize(
    "style, name, pre, suf, mid, stops",
    [
        ("starcoder", "starcoder", "<fim_prefix>", "<fim_suffix>", "<fim_middle>", {"<|endoftext|>", "<pad>"}),
        ("qwen", "qwen2.5-coder", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>",
         {"<|endoftext|>", "<|fim_pad|>", "<|file_sep|>", "<|repo_name|>"}),
        ("codellama", "codellama", "▁<PRE>", "▁<SUF>", "▁<MID>", {"▁<EOT>", "</s>"}),
    ],
)
def test_detects_template_from_special_tokens(tokenizers, style, name, pre, suf, mid, stops):
    tok = tokenizers[style]
    fmt = detect_format(tok)
    assert fmt.name == name
    assert (fmt.prefix_id, fmt.suffix_id, fmt.middle_id) == tuple(map(tok.token_id, (pre, suf, mid)))
    assert fmt.stop_ids == {tok.token_id(s) for s in stops}
    assert (fmt.bos_id is not None) == (style == "codellama")


def test_tokenizer_without_fim_tokens_is_refused(tokenizers):
    with pytest.raises(ConfigError, match="fill-in-the-middle"):
        detect_format(tokenizers["plain"])


@pytest.mark.parametrize("style", ["starcoder", "qwen", "codellama"])
def test_prompt_layout_psm(tokenizers, style):
    tok = tokenizers[style]
    fmt = detect_format(tok)
    prefix, suffix = "def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n"
    prompt = build_prompt(tok, fmt, prefix, suffix, PromptConfig(order="psm", token_healing=False))
    head = [fmt.bos_id] if style == "codellama" else []
    assert prompt.ids == head + [fmt.prefix_id, *tok.encode(prefix), fmt.suffix_id, *tok.encode(suffix),
                                 fmt.middle_id]
    assert prompt.prefix_cut == 0
    assert (prompt.prefix_tokens, prompt.suffix_tokens) == (len(tok.encode(prefix)), len(tok.encode(suffix)))


def test_prompt_layout_spm_for_models_trained_on_it(tokenizers):
    tok = tokenizers["starcoder"]
    fmt = detect_format(tok)
    prefix, suffix = "def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n"
    prompt = build_prompt(tok, fmt, prefix, suffix, PromptConfig(token_healing=False))  # auto -> SPM for this template
    assert prompt.ids == [fmt.prefix_id, fmt.suffix_id, *tok.encode(suffix), fmt.middle_id, *tok.encode(prefix)]
    with pytest.raises(ConfigError, match="SPM"):
        build_prompt(tokenizers["qwen"], detect_format(tokenizers["qwen"]), prefix, suffix, PromptConfig(order="spm"))
    qwen = detect_format(tokenizers["qwen"])
    assert build_prompt(tokenizers["qwen"], qwen, prefix, suffix, PromptConfig(token_healing=False)).ids[-1] == qwen.middle_id


def test_typing_in_spm_order_keeps_everything_but_the_last_word(tokenizers):
    tok = tokenizers["starcoder"]
    fmt = detect_format(tok)
    typed, suffix = "total = price * quantity", "\n" + LONG_FILE
    prev, hint = None, None
    for n in range(1, len(typed) + 1):
        prompt = build_prompt(tok, fmt, LONG_FILE + typed[:n], suffix, PromptConfig(budget=200, token_healing=False), hint)
        hint = prompt.prefix_cut
        if prev is not None and prev.prefix_cut == prompt.prefix_cut:
            common = next((i for i, (a, b) in enumerate(zip(prev.ids, prompt.ids)) if a != b), len(prev.ids))
            assert len(prompt.ids) - common <= 4
        prev = prompt


def _split(prompt, fmt):
    """(prefix ids, suffix ids) of a prompt in either order."""
    ids = prompt.ids
    i, j, m = ids.index(fmt.prefix_id), ids.index(fmt.suffix_id), ids.index(fmt.middle_id)
    if j == i + 1:  # SPM: PRE SUF suffix MID prefix
        return ids[m + 1 :], ids[j + 1 : m]
    return ids[i + 1 : j], ids[j + 1 : m]


def test_budget_is_weighted_toward_the_prefix_and_cuts_whole_lines(tokenizers):
    tok = tokenizers["starcoder"]
    fmt = detect_format(tok)
    cfg = PromptConfig(budget=100, prefix_share=0.75, cut_slack=0.0, token_healing=False)
    prefix, suffix = LONG_FILE, LONG_FILE
    prompt = build_prompt(tok, fmt, prefix, suffix, cfg)
    p_ids, s_ids = _split(prompt, fmt)
    assert len(p_ids) <= 75 and len(s_ids) <= 25
    assert len(p_ids) > 60 and len(s_ids) > 10  # nearly all of the share is used
    kept_prefix, kept_suffix = tok.decode(p_ids), tok.decode(s_ids)
    assert prefix.endswith(kept_prefix) and prefix[: prompt.prefix_cut].endswith("\n")
    assert prefix[prompt.prefix_cut :] == kept_prefix
    assert suffix.startswith(kept_suffix) and kept_suffix.endswith("\n")


def test_unused_share_moves_to_the_other_side(tokenizers):
    tok = tokenizers["starcoder"]
    fmt = detect_format(tok)
    cfg = PromptConfig(budget=100, prefix_share=0.75, cut_slack=0.0, token_healing=False)
    short = "x = 1\n"
    p_ids, s_ids = _split(build_prompt(tok, fmt, LONG_FILE, short, cfg), fmt)
    assert s_ids == tok.encode(short) and len(p_ids) > 75 and len(p_ids) + len(s_ids) <= 100
    p_ids, s_ids = _split(build_prompt(tok, fmt, short, LONG_FILE, cfg), fmt)
    assert p_ids == tok.encode(short) and len(s_ids) > 25 and len(p_ids) + len(s_ids) <= 100


def test_a_single_overlong_line_is_cut_at_a_token_boundary(tokenizers):
    tok = tokenizers["starcoder"]
    fmt = detect_format(tok)
    line = "values = [" + ", ".join(str(i) for i in range(300)) + "]"
    prompt = build_prompt(tok, fmt, line, line,
                          PromptConfig(budget=40, prefix_share=0.5, cut_slack=0.0, token_healing=False))
    p_ids, s_ids = _split(prompt, fmt)
    assert 0 < len(p_ids) <= 20 and 0 < len(s_ids) <= 20
    assert line.endswith(tok.decode(p_ids)) and line.startswith(tok.decode(s_ids))


def test_consecutive_keystrokes_keep_the_prefix_cut(tokenizers):
    """Typing at the end of a file larger than the budget: the cut stays put (slack), so each
    prompt shares all of the previous prefix up to the edit point."""
    tok = tokenizers["starcoder"]
    fmt = detect_format(tok)
    cfg = PromptConfig(budget=120, prefix_share=0.75, cut_slack=0.25, token_healing=False)
    typed = "result = compute(alpha, beta)"
    prev, hint, cuts = None, None, []
    for n in range(len(typed) + 1):
        prompt = build_prompt(tok, fmt, LONG_FILE + typed[:n], "\n", cfg, hint)
        hint = prompt.prefix_cut
        cuts.append(hint)
        assert prompt.prefix_tokens + prompt.suffix_tokens <= 120
        if prev is not None and cuts[-1] == cuts[-2]:
            common = next((i for i, (a, b) in enumerate(zip(prev.ids, prompt.ids)) if a != b), len(prev.ids))
            assert common >= prompt.prefix_tokens - 4  # only the last word's tokens change
        prev = prompt
    assert len(set(cuts)) <= 2  # the slack absorbs a whole line of typing (at most one move)


def test_tiny_and_zero_shares(tokenizers):
    tok = tokenizers["qwen"]
    fmt = detect_format(tok)
    prompt = build_prompt(tok, fmt, LONG_FILE, LONG_FILE, PromptConfig(budget=1, prefix_share=1.0, token_healing=False))
    assert _split(prompt, fmt) == (_split(prompt, fmt)[0], []) and len(_split(prompt, fmt)[0]) == 1
    prompt = build_prompt(tok, fmt, LONG_FILE, LONG_FILE, PromptConfig(budget=10, prefix_share=0.0, token_healing=False))
    p_ids, s_ids = _split(prompt, fmt)
    assert p_ids == [] and 0 < len(s_ids) <= 10


def test_config_validation():
    for bad in (PromptConfig(budget=0), PromptConfig(prefix_share=1.5), PromptConfig(cut_slack=1.0)):
        with pytest.raises(ConfigError):
            bad.validate()


@pytest.mark.parametrize("order", ["psm", "spm"])
def test_token_healing_leaves_the_last_prefix_token_to_the_model(tokenizers, order):
    tok = tokenizers["starcoder"]
    fmt = detect_format(tok)
    prefix, suffix = "def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n"
    plain = build_prompt(tok, fmt, prefix, suffix, PromptConfig(order=order, token_healing=False))
    healed = build_prompt(tok, fmt, prefix, suffix, PromptConfig(order=order))
    last = tok.encode(prefix)[-1]
    assert healed.heal == tok.decode([last]) and prefix.endswith(healed.heal) and healed.heal
    assert healed.prefix_tokens == plain.prefix_tokens - 1
    expected = list(plain.ids)
    del expected[len(expected) - 1 if order == "spm" else plain.prefix_tokens]  # [PRE, p_1..p_n, SUF, ...]
    assert healed.ids == expected
    empty = build_prompt(tok, fmt, "", suffix, PromptConfig(order=order))
    assert empty.heal == "" and empty.prefix_tokens == 0


@pytest.mark.parametrize("text, expected", [
    ("<fim_prefix>def f():\n    return <fim_suffix>\n\nf()\n<fim_middle>", ("def f():\n    return ", "\n\nf()\n")),
    ("<|fim_prefix|>a = <|fim_suffix|>\n<|fim_middle|>", ("a = ", "\n")),
    ("<PRE> x = <SUF>\ny = 2 <MID>", ("x =", "\ny = 2")),
    ("# other.py\n<fim_prefix>a<fim_suffix>b<fim_middle>", ("# other.py\na", "b")),  # context before it
    ("<fim_prefix><fim_suffix><fim_middle>", ("", "")),
    ("def f():\n    return ", None),  # plain text: a prefix
    ("<fim_prefix>a<fim_suffix>b<fim_middle>c", None),  # does not end with the middle marker
    ("<fim_suffix>b<fim_prefix>a<fim_middle>", None),  # SPM order
    ("<fim_prefix>a<fim_prefix><fim_suffix>b<fim_middle>", None),  # a marker twice
])
def test_split_fim_text(text, expected):
    assert split_fim_text(text) == expected
