"""Fill-in-the-middle prompts: model-specific templates, detection, and the token budget.

A template is recognised from the tokenizer's special tokens (no model names are trusted).
Two orders exist. PSM — `[BOS] PRE prefix SUF suffix MID` — which every supported family was
trained on: because the suffix follows the prefix, each keystroke re-runs the prompt from the
edit point on (the whole suffix), so the prefix gets most of the budget to keep that tail
short. SPM — `PRE SUF suffix MID prefix` (StarCoder's variant; the default model is trained on
both) — puts the suffix first, so typing at the cursor leaves every cached token valid except
the last word's: a keystroke recomputes a handful of tokens instead of the suffix. Templates
whose models were trained on SPM use it by default (`PromptConfig.order = "auto"`).

The budget counts context tokens (prefix + suffix, not control tokens). When the context does
not fit, the prefix loses whole lines from its top and the suffix whole lines from its bottom.
The prefix cut is deliberately deeper than necessary (`cut_slack`) and is remembered by the
session, so the next keystrokes keep the same cut and their prompts share a prefix."""

from __future__ import annotations

from dataclasses import dataclass

from umbra.engine.config import PromptConfig
from umbra.engine.healing import healed_tokens
from umbra.engine.tokenizer import ClientTokenizer
from umbra.errors import ConfigError

_CHARS_PER_TOKEN_CAP = 16  # only this many chars per budget token are tokenized when cutting


@dataclass(frozen=True)
class FimTemplate:
    name: str
    prefix: str  # control token strings, exactly as in the vocabulary
    suffix: str
    middle: str
    stops: tuple[str, ...]  # tokens that end the middle (those absent from the vocab are ignored)
    bos: bool = False  # prepend the tokenizer's BOS token
    spm: bool = False  # the model family was also trained in SPM order (see the module doc)


TEMPLATES = (
    FimTemplate("qwen2.5-coder", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>",
                ("<|endoftext|>", "<|fim_pad|>", "<|file_sep|>", "<|repo_name|>", "<|im_end|>")),
    # The default model and StarCoder / SantaCoder.
    FimTemplate("starcoder", "<fim_prefix>", "<fim_suffix>", "<fim_middle>",
                ("<|endoftext|>", "<pad>", "<fim_pad>", "<file_sep>"), spm=True),
    # CodeLlama's sentencepiece vocab spells its infilling tokens with a leading '▁'.
    FimTemplate("codellama", "▁<PRE>", "▁<SUF>", "▁<MID>", ("▁<EOT>", "</s>"), bos=True),
    FimTemplate("codellama", "<PRE>", "<SUF>", "<MID>", ("<EOT>", "</s>"), bos=True),
)


# How clients that lay out FIM prompts themselves (editor plugins such as Continue, for servers
# whose API takes one prompt) write the markers as text: prefix, suffix and middle, PSM order.
# StarCoder's spelling, Qwen2.5-Coder's / CodeGemma's, and CodeLlama's (with its spaces).
TEXT_MARKERS = (
    ("<fim_prefix>", "<fim_suffix>", "<fim_middle>"),
    ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"),
    ("<PRE> ", " <SUF>", " <MID>"),
)


def split_fim_text(text: str) -> tuple[str, str] | None:
    """(prefix, suffix) of a prompt written as a PSM FIM template in text — `PRE prefix SUF
    suffix MID`, each marker once, ending with MID (TEXT_MARKERS) — else None. Text before the
    prefix marker (a plugin's context) stays in front of the prefix. Such text is never encoded
    as control tokens (tokenizer.py): splitting it is how those prompts are completed as FIM."""
    for pre, suf, mid in TEXT_MARKERS:
        if text.endswith(mid) and all(text.count(marker) == 1 for marker in (pre, suf, mid)):
            head, _, rest = text[: -len(mid)].partition(pre)
            prefix, found, suffix = rest.partition(suf)
            if found:
                return head + prefix, suffix
    return None


@dataclass(frozen=True)
class FimFormat:
    """A template resolved against one tokenizer: the ids the engine actually uses."""

    template: FimTemplate
    prefix_id: int
    suffix_id: int
    middle_id: int
    stop_ids: frozenset[int]  # template stops + the tokenizer's EOS tokens
    bos_id: int | None

    @property
    def name(self) -> str:
        return self.template.name

    def uses_spm(self, order: str) -> bool:
        if order == "spm" and not self.template.spm:
            raise ConfigError(f"the {self.name} FIM template has no SPM order")
        return order == "spm" or (order == "auto" and self.template.spm)


def detect_format(tok: ClientTokenizer) -> FimFormat:
    """The first template whose three control tokens the tokenizer has; ConfigError if none."""
    for t in TEMPLATES:
        if tok.has_tokens(t.prefix, t.suffix, t.middle):
            stops = {i for i in map(tok.token_id, t.stops) if i is not None} | set(tok.eos_ids)
            if not stops:
                raise ConfigError(f"tokenizer has {t.name} FIM tokens but no end-of-middle token")
            bos = tok.bos_id if t.bos else None
            return FimFormat(t, tok.token_id(t.prefix), tok.token_id(t.suffix), tok.token_id(t.middle),
                             frozenset(stops), bos)
    names = ", ".join(sorted({t.name for t in TEMPLATES}))
    raise ConfigError(f"the tokenizer has no fill-in-the-middle tokens of a known template ({names})")


@dataclass(frozen=True)
class FimPrompt:
    ids: list[int]
    prefix_cut: int  # characters dropped from the start of the prefix
    prefix_tokens: int  # context tokens of each side in the prompt
    suffix_tokens: int
    heal: str = ""  # text of the prefix's last tokens, left out for the model to re-create (healing.py)


def build_prompt(tok: ClientTokenizer, fmt: FimFormat, prefix: str, suffix: str,
                 cfg: PromptConfig, cut_hint: int | None = None, head: tuple[int, ...] = (),
                 lead: tuple[int, ...] = ()) -> FimPrompt:
    """The FIM prompt for the cursor between `prefix` and `suffix`. `cut_hint` is the previous
    request's `prefix_cut`; it is kept whenever it still yields a prefix within budget. Context
    from open files (engine/context.py; outside `cfg.budget`, which the caller shrinks for it):
    `head` goes before the FIM markers (the repository layout: `<file_sep>` files), `lead`
    right before the prefix (comment layout); both stay put across keystrokes."""
    budget = cfg.budget
    p_share = round(budget * cfg.prefix_share)
    tail_start = _line_start_before(prefix, len(prefix) - _CHARS_PER_TOKEN_CAP * budget)
    p_ids, p_offs = tok.encode_with_offsets(prefix[tail_start:])
    s_head = suffix[: _CHARS_PER_TOKEN_CAP * budget]
    s_ids, s_offs = tok.encode_with_offsets(s_head)
    # Split the budget: a side that needs less than its share hands the rest to the other.
    if len(p_ids) <= p_share:
        p_alloc, s_alloc = len(p_ids), budget - len(p_ids)
    elif len(s_ids) <= budget - p_share:
        p_alloc, s_alloc = budget - len(s_ids), len(s_ids)
    else:
        p_alloc, s_alloc = p_share, budget - p_share
    cut, p_ids = _cut_prefix(tok, prefix, tail_start, p_ids, p_offs, p_alloc, cfg.cut_slack, cut_hint)
    s_ids = _cut_suffix(tok, s_head, s_ids, s_offs, s_alloc)
    heal = ""
    if cfg.token_healing and p_ids:  # leave the cursor's unfinished text to the model (healing.py)
        k = healed_tokens(tok, prefix, p_ids)
        if k:
            heal, p_ids = tok.decode(p_ids[-k:]), p_ids[:-k]
    bos = [fmt.bos_id] if fmt.bos_id is not None else []
    if fmt.uses_spm(cfg.order):
        ids = bos + [*head, fmt.prefix_id, fmt.suffix_id, *s_ids, fmt.middle_id, *lead, *p_ids]
    else:
        ids = bos + [*head, fmt.prefix_id, *lead, *p_ids, fmt.suffix_id, *s_ids, fmt.middle_id]
    return FimPrompt(ids, cut, len(p_ids), len(s_ids), heal)


def _line_start_before(text: str, pos: int) -> int:
    """The start of the line containing `pos` (0 if pos <= 0)."""
    if pos <= 0:
        return 0
    return text.rfind("\n", 0, pos) + 1


def _cut_prefix(tok, prefix, tail_start, ids, offs, alloc, slack, hint) -> tuple[int, list[int]]:
    """(cut, ids of prefix[cut:]) with at most `alloc` tokens, preferring line starts."""
    if len(ids) <= alloc and tail_start == 0:
        return 0, ids
    if hint is not None and tail_start <= hint <= len(prefix) and (hint == 0 or prefix[hint - 1] == "\n"):
        kept = tok.encode(prefix[hint:])
        if len(kept) <= alloc:
            return hint, kept
    if alloc == 0:
        return len(prefix), []
    target = max(1, int(alloc * (1.0 - slack)))
    # Candidate cuts: line starts inside the tail, tried from the longest kept text.
    first_ok = len(ids) - target  # first token index that may be kept
    min_char = tail_start + (offs[first_ok][0] if first_ok > 0 else 0)
    cut = prefix.find("\n", max(min_char - 1, 0))  # the first line start at or after min_char
    while cut != -1 and cut + 1 < len(prefix):
        candidate = cut + 1
        kept = tok.encode(prefix[candidate:])
        if len(kept) <= alloc:
            return candidate, kept
        cut = prefix.find("\n", candidate)
    # The last line alone is too long: cut at a token boundary.
    start = tail_start + offs[len(ids) - target][0]
    kept = tok.encode(prefix[start:])
    while len(kept) > alloc:  # re-encoding merged across the cut; drop from the front
        start += 1
        kept = tok.encode(prefix[start:])
    return start, kept


def _cut_suffix(tok, head, ids, offs, alloc) -> list[int]:
    """ids of the longest head of the suffix ending at a line end with at most `alloc` tokens
    (or just its first `alloc` tokens if even the first line is too long)."""
    if len(ids) <= alloc:
        return ids
    if alloc == 0:
        return []
    limit = offs[alloc][0]  # text before the first token that does not fit
    end = head.rfind("\n", 0, limit) + 1
    while end > 0:
        kept = tok.encode(head[:end])
        if len(kept) <= alloc:
            return kept
        end = head.rfind("\n", 0, end - 1) + 1
    return ids[:alloc]
