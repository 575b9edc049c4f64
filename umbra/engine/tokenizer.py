"""ClientTokenizer: the one place where text meets token ids on the client.

Everything above it (FIM prompts, sampling masks, stop tokens) uses the ids this wrapper hands
out and never calls the underlying tokenizer itself. With a client bundle's secret permutation π
(`ClientTokenizer.from_dir(dir, permutation=π)` or `.with_permutation(π)`) every id it hands out
or takes is private, p = π(public id): encode/decode, token_id, special/eos/bos ids and
vocab_mask are the whole id surface, so nothing above this module knows which space it is in.

User text is encoded with special-token matching switched off, so a file that contains the
literal string "<fim_middle>" cannot inject control tokens into the prompt."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from umbra.errors import ConfigError

_HEAL_MASK_CACHE = 256  # token-healing masks kept per tokenizer (oldest dropped first)


class ClientTokenizer:
    def __init__(self, tokenizer, eos_tokens: tuple[str, ...] = (), bos_token: str | None = None,
                 permutation=None):
        """`tokenizer` is a `tokenizers.Tokenizer`; eos/bos name the model's own special tokens.
        `permutation`: a client bundle's `umbra.privacy.ltokenizer.Permutation` (ids private)."""
        self._tok = tokenizer
        self._text_tok = tokenizer.from_str(tokenizer.to_str())  # copy that never matches specials
        self._text_tok.encode_special_tokens = True
        self._names = (tuple(eos_tokens), bos_token)
        self.size = tokenizer.get_vocab_size(with_added_tokens=True)  # public ids are in [0, size)
        self._perm = permutation
        if permutation is not None and permutation.size < self.size:
            raise ConfigError(f"the permutation covers {permutation.size} ids, the tokenizer has {self.size}")
        added = tokenizer.get_added_tokens_decoder()
        self.special_ids = frozenset(self._out(i) for i, tok in added.items() if tok.special)
        self.eos_ids = frozenset(i for i in map(self.token_id, eos_tokens) if i is not None)
        self.bos_id = self.token_id(bos_token) if bos_token else None
        self._by_first: dict[str, list[tuple[int, str]]] | None = None  # token healing's index, built on use
        self._by_text: dict[str, list[int]] | None = None  # token text -> client ids, built with it
        self._first_chars: dict[str, list[int]] = {}  # first character -> ids, partial characters included
        self._first_masks: dict[tuple[str, int], torch.Tensor] = {}  # (chars, vocab size) -> mask
        self._heal_masks: dict[tuple[str, int], torch.Tensor] = {}  # (text, vocab size) -> mask

    @property
    def private(self) -> bool:
        """True when ids are private (a bundle's permutation applies)."""
        return self._perm is not None

    def with_permutation(self, permutation) -> "ClientTokenizer":
        """The same tokenizer handing out private ids π(public id)."""
        return ClientTokenizer(self._tok, *self._names, permutation=permutation)

    def __repr__(self) -> str:  # never show the permutation
        return f"ClientTokenizer(size={self.size}, private={self.private})"

    def _out(self, public_id: int) -> int:
        return public_id if self._perm is None else self._perm.to_private(int(public_id))

    @classmethod
    def from_dir(cls, model_dir: str | Path, permutation=None) -> "ClientTokenizer":
        """Load `tokenizer.json` of a local HF model dir; EOS/BOS from its tokenizer_config.json
        and config.json / generation_config.json (`eos_token_id` may be an int or a list)."""
        from tokenizers import Tokenizer

        d = Path(model_dir)
        path = d / "tokenizer.json"
        if not path.is_file():
            raise ConfigError(f"{d} has no tokenizer.json (a fast Hugging Face tokenizer is required)")
        try:
            tok = Tokenizer.from_file(str(path))
        except Exception as exc:  # tokenizers raises plain Exception on malformed files
            raise ConfigError(f"cannot read {path}: {exc}") from exc
        eos: list[str] = []
        bos = None
        tok_cfg = _read_json(d / "tokenizer_config.json")
        if isinstance(_name(tok_cfg.get("eos_token")), str):
            eos.append(_name(tok_cfg["eos_token"]))
        if isinstance(_name(tok_cfg.get("bos_token")), str):
            bos = _name(tok_cfg["bos_token"])
        for cfg_name in ("config.json", "generation_config.json"):
            ids = _read_json(d / cfg_name).get("eos_token_id")
            for i in ids if isinstance(ids, list) else [ids]:
                if isinstance(i, int) and (name := tok.id_to_token(i)) is not None:
                    eos.append(name)
        return cls(tok, tuple(dict.fromkeys(eos)), bos, permutation)

    # -- ids ------------------------------------------------------------------------------
    def token_id(self, token: str) -> int | None:
        """Id of a token given by its exact vocabulary string, or None if absent."""
        public_id = self._tok.token_to_id(token)
        return None if public_id is None else self._out(public_id)

    def has_tokens(self, *tokens: str) -> bool:
        return all(self.token_id(t) is not None for t in tokens)

    def vocab_mask(self, vocab_size: int) -> torch.Tensor:
        """bool [vocab_size]: True at ids that stand for a token of this tokenizer (models often
        pad their embedding table past the vocabulary)."""
        mask = torch.zeros(vocab_size, dtype=torch.bool)
        mask[: min(self.size, vocab_size)] = True
        if self._perm is None:
            return mask
        if self._perm.size != vocab_size:
            raise ConfigError(f"the permutation covers {self._perm.size} ids, the model {vocab_size}")
        return mask[self._perm.to_public(torch.arange(vocab_size))]  # private p <- public π⁻¹(p)

    # -- text -----------------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        """Plain text (no special tokens recognised, none added) -> ids."""
        if not text:
            return []
        ids = self._text_tok.encode(text, add_special_tokens=False).ids
        return ids if self._perm is None else self._perm.to_private(ids)

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """ids and each token's character span in `text`."""
        if not text:
            return [], []
        enc = self._text_tok.encode(text, add_special_tokens=False)
        return (enc.ids if self._perm is None else self._perm.to_private(enc.ids)), enc.offsets

    def ids_starting_with(self, text: str, vocab_size: int) -> torch.Tensor:
        """bool [vocab_size]: the (non-special) ids whose own text starts with `text` — token
        healing's constraint while the healed text is re-created (healing.py)."""
        key = (text, vocab_size)
        mask = self._heal_masks.get(key)
        if mask is None:  # the same few texts (a space, an indent, a dot) come back every keystroke
            mask = torch.zeros(vocab_size, dtype=torch.bool)
            ids = [i for i, t in self._texts_by_first_char().get(text[:1], ()) if t.startswith(text) and i < vocab_size]
            if ids:
                mask[ids] = True
            if len(self._heal_masks) >= _HEAL_MASK_CACHE:
                self._heal_masks.pop(next(iter(self._heal_masks)))
            self._heal_masks[key] = mask
        return mask

    def ids_of_prefixes(self, text: str, vocab_size: int) -> list[int]:
        """The (non-special) ids whose own text is a non-empty prefix of `text` (`text` itself
        included) — the tokens that re-create part of a healed text."""
        self._texts_by_first_char()
        return [i for n in range(1, len(text) + 1) for i in self._by_text.get(text[:n], ()) if i < vocab_size]

    def ids_with_first_char(self, chars: str, vocab_size: int) -> torch.Tensor:
        """bool [vocab_size]: the (non-special) ids whose text starts with one of `chars`,
        those ending in part of a multi-byte character included (" \\xe2" starts with a blank)."""
        key = (chars, vocab_size)
        mask = self._first_masks.get(key)
        if mask is None:  # the same blanks after every healed indentation: built once
            self._texts_by_first_char()
            mask = torch.zeros(vocab_size, dtype=torch.bool)
            ids = [i for ch in chars for i in self._first_chars.get(ch, ()) if i < vocab_size]
            if ids:
                mask[ids] = True
            self._first_masks[key] = mask
        return mask

    def _texts_by_first_char(self) -> dict[str, list[tuple[int, str]]]:
        """First character -> [(client id, token text)] over every non-special token whose text
        is whole characters (byte pieces of a multi-byte character are left out). Built once."""
        if self._by_first is None:
            by_first: dict[str, list[tuple[int, str]]] = {}
            by_text: dict[str, list[int]] = {}
            specials = {i for i, t in self._tok.get_added_tokens_decoder().items() if t.special}
            for public_id in range(self.size):
                if public_id in specials:
                    continue
                text = self._tok.decode([public_id], skip_special_tokens=True)
                if text:
                    self._first_chars.setdefault(text[0], []).append(self._out(public_id))
                if text and "\ufffd" not in text:
                    by_first.setdefault(text[0], []).append((self._out(public_id), text))
                    by_text.setdefault(text, []).append(self._out(public_id))
            self._by_first, self._by_text = by_first, by_text
        return self._by_first

    def decode(self, ids: list[int]) -> str:
        """ids -> text, dropping special tokens."""
        if self._perm is not None:
            ids = self._perm.to_public([int(i) for i in ids])
        return self._tok.decode([i for i in ids if i < self.size], skip_special_tokens=True)


def _read_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    return data if isinstance(data, dict) else {}


def _name(token) -> str | None:
    """tokenizer_config stores special tokens as strings or as AddedToken dicts."""
    if isinstance(token, dict):
        return token.get("content")
    return token
