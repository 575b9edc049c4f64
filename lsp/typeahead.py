"""TypeAhead: the rest of a completion the user is typing into, served without a decode.

The editor shows a completion as ghost text; the user, rather than accept it, goes on typing its
first characters. The next request's prefix is then the shown request's prefix plus those
characters, its suffix unchanged, and the answer is the rest of the shown completion: no prompt
to run, no cloud round trip, nothing sent.

    typeahead = TypeAhead()
    typeahead.remember(key, prefix, suffix, result, config=config, language=language)
    rest = typeahead.lookup(key, prefix + "ret", suffix, config=config, language=language)
    rest.text   # result.text after "ret", if result.text starts with "ret" (else rest is None)

Per key (an editor document) the last `per_key` completions answered are kept, the most recently
used first, and keys are LRU-bounded (`max_keys`). An entry holds the length and a BLAKE2b digest
of its prefix and of its suffix — never a copy of the document — with the completion, the engine
config and the language it was made with: a request under another config or language never
matches. Nothing typed (the same request again: the editor asks anew, e.g. explicitly, and gets
a decode, reusing the whole prompt's cache) is a miss, and so is typed text that leaves nothing
of the completion (all of it typed, or more); empty completions are not kept. A hit moves its
entry to the front and adds none: the next keystroke matches the same entry further along.

What the user sees then stays what was shown, where a fresh decode of the longer prefix may
differ (the prompt's tokens change mid-word); benchmarks/keystroke.py counts how often, and
which of the two the file really goes on with."""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass, replace

from umbra.engine import CompletionResult, EngineConfig


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


@dataclass(frozen=True)
class _Shown:
    prefix_length: int
    prefix_digest: bytes
    suffix_digest: bytes
    config: EngineConfig | None
    language: str | None
    result: CompletionResult

    def rest(self, prefix: str, suffix_digest: bytes, config: EngineConfig | None,
             language: str | None) -> str | None:
        """What is left of the completion after what `prefix` typed past this entry's; None if
        the request is not this entry's continued by typing its first characters."""
        text = self.result.text
        typed = len(prefix) - self.prefix_length
        if not 1 <= typed < len(text) or not prefix.endswith(text[:typed]):
            return None
        if (config, language, suffix_digest) != (self.config, self.language, self.suffix_digest):
            return None
        if _digest(prefix[: self.prefix_length]) != self.prefix_digest:
            return None
        return text[typed:]


def served_rest(result: CompletionResult, rest: str) -> CompletionResult:
    """`result` shortened to `rest`, as a request that ran nothing reports it: no prompt tokens,
    none generated, no time (stop reason, template, language, expert and access are the shown one's)."""
    return replace(result, text=rest, tokens=(), prompt_tokens=0, reused_tokens=0, recomputed_tokens=0,
                   prefill_seconds=0.0, decode_seconds=0.0, evicted=False, round_trips=0, speculation=None)


class TypeAhead:
    def __init__(self, per_key: int = 8, max_keys: int = 64):
        if per_key < 1 or max_keys < 1:
            raise ValueError("per_key and max_keys must be >= 1")
        self.per_key = per_key
        self.max_keys = max_keys
        self._shown: OrderedDict[str, list[_Shown]] = OrderedDict()  # key -> entries, most recent first

    def __len__(self) -> int:
        """Entries held, over every key."""
        return sum(len(entries) for entries in self._shown.values())

    def remember(self, key: str, prefix: str, suffix: str, result: CompletionResult, *,
                 config: EngineConfig | None = None, language: str | None = None) -> None:
        """Keep `result` (a completion the editor is shown) for the key; empty completions are not kept."""
        if not result.text:
            return
        entry = _Shown(len(prefix), _digest(prefix), _digest(suffix), config, language, result)
        entries = self._shown.pop(key, [])
        entries = [entry] + [e for e in entries if (e.prefix_length, e.prefix_digest, e.suffix_digest, e.config,
                                                    e.language) != (entry.prefix_length, entry.prefix_digest,
                                                                    entry.suffix_digest, config, language)]
        self._shown[key] = entries[: self.per_key]
        while len(self._shown) > self.max_keys:
            self._shown.popitem(last=False)

    def lookup(self, key: str, prefix: str, suffix: str, *, config: EngineConfig | None = None,
               language: str | None = None) -> CompletionResult | None:
        """The rest of a kept completion of the key that `prefix` typed into (see `served_rest`),
        or None."""
        entries = self._shown.get(key)
        if not entries:
            return None
        suffix_digest = None
        for i, entry in enumerate(entries):
            if not 1 <= len(prefix) - entry.prefix_length < len(entry.result.text):
                continue  # cheap test first: the digests cost a pass over the document
            suffix_digest = suffix_digest or _digest(suffix)
            rest = entry.rest(prefix, suffix_digest, config, language)
            if rest is not None:
                entries.insert(0, entries.pop(i))
                self._shown.move_to_end(key)
                return served_rest(entry.result, rest)
        return None

    def forget(self, key: str) -> None:
        self._shown.pop(key, None)

    def clear(self) -> None:
        self._shown.clear()
