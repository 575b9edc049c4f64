"""Token healing at the cursor: the prompt ends where the model's own tokenization would put a
boundary, and the model re-creates the text the cursor already has.

An editor leaves the cursor where no tokenizer would split. After Enter and auto-indent the
prefix ends in `"\\n        "`; a byte-level BPE tokenizer encodes that text as one token, but in
the files the model learned from the same blanks were followed by code and were split as
`"\\n       "` + `" if"`. Ending the prompt on `"\\n        "` asks the model to continue a
token sequence it never saw, and it answers with the blanks again (`" if"`): the completion
starts with blanks the cursor already has. The same holds after a typed blank (`x = `) and after
a partial word (`ret`).

So the prompt drops the prefix tokens that overlap the cursor's unfinished text — the trailing
partial word, or else the trailing blanks of the cursor line — (at least the last token, at
most `MAX_HEALED_TOKENS`), and decoding is constrained until the model has re-created their
text (`HealingConstraint`): each generated token must either lie inside the text still to be
re-created or extend past its end. The model thereby picks the split it knows (`"\\n       "`
then `" if"`). When the healed text ends in a blank, the code the model writes after it may not
start with another blank (neither inside the token that completes the healed text nor as the
next token): the cursor's indentation is the editor's, and a completion never adds blanks in
front of the code at the cursor. The completion is the generated text after the healed text.

Tokens are matched by their decoded text (ClientTokenizer's index of whole-character tokens),
so this works for any byte-level tokenizer — the default model's and every Hugging Face family
the loader takes — and in a client bundle's private id space alike."""

from __future__ import annotations

import re

import torch

from umbra.engine.tokenizer import ClientTokenizer

MAX_HEALED_TOKENS = 8  # most prefix tokens left for the model to re-create
BLANKS = (" ", "\t")
_WORD_END = re.compile(r"\w+\Z")
_BLANKS_END = re.compile(r"[ \t]+\Z")


def unfinished_start(prefix: str) -> int:
    """Where the text the cursor is in the middle of begins: the trailing partial word, else the
    trailing blanks of the cursor line, else the end (only the last token is then healed)."""
    word = _WORD_END.search(prefix)
    if word is not None:
        return word.start()
    blanks = _BLANKS_END.search(prefix)
    return blanks.start() if blanks is not None else len(prefix)


def healed_tokens(tok: ClientTokenizer, prefix: str, ids: list[int]) -> int:
    """How many of the last `ids` (the encoding of a tail of `prefix`) to leave out of the
    prompt: the fewest (≥ 1) whose text covers the cursor's unfinished text, at most
    MAX_HEALED_TOKENS; 0 when even the last token's text is not whole characters of the prefix."""
    need = len(prefix) - unfinished_start(prefix)
    best = 0
    for k in range(1, min(MAX_HEALED_TOKENS, len(ids)) + 1):
        text = tok.decode(ids[-k:])
        if not text or "\ufffd" in text or not prefix.endswith(text):
            break  # half a character, or text the tokenizer does not decode back
        best = k
        if len(text) >= need:
            break
    return best


class HealingConstraint:
    """The eligible ids of each decode step while the healed text `heal` is being re-created
    (and the step right after it, when `heal` ends in a blank); None once decoding is free."""

    def __init__(self, tok: ClientTokenizer, heal: str, allowed: torch.Tensor):
        self.tok = tok
        self.heal = heal
        self.allowed = allowed  # bool [V]: the request's own eligible ids
        self.vocab = allowed.numel()
        self.no_blank = heal.endswith(BLANKS)
        self.done = not heal

    def mask(self, produced: str) -> torch.Tensor | None:
        """bool [V] for the next token, given the text generated so far (`produced`, which the
        constraint kept a prefix of `heal` or an extension of it); None: no constraint."""
        if self.done:
            return None
        if len(produced) < len(self.heal):
            mask = self._inside_or_across(self.heal[len(produced):])
        else:
            self.done = True  # the heal ended on a token boundary: one more step is constrained
            if not self.no_blank or len(produced) > len(self.heal):
                return None
            mask = self.allowed & ~self._starting_with_blank()
        return mask if bool(mask.any()) else None  # a vocabulary without such ids: leave it free

    def _inside_or_across(self, rest: str) -> torch.Tensor:
        """Ids whose text is a prefix of `rest`, or starts with `rest` (then, after a blank, not
        followed by another blank)."""
        across = self.tok.ids_starting_with(rest, self.vocab)
        if self.no_blank:
            for blank in BLANKS:
                across = across & ~self.tok.ids_starting_with(rest + blank, self.vocab)
        inside = torch.zeros(self.vocab, dtype=torch.bool)
        ids = self.tok.ids_of_prefixes(rest, self.vocab)
        if ids:
            inside[ids] = True
        return self.allowed & (across | inside)

    def _starting_with_blank(self) -> torch.Tensor:
        return self.tok.ids_with_first_char("".join(BLANKS), self.vocab)
