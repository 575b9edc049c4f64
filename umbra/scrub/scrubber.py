"""`Scrubber(config).scrub(text, path=None) -> ScrubResult(text, findings)`: the scrubbed view of
one file. Every detector proposes candidate spans (secrets.py, patterns.py, names.py), overlaps
are resolved (findings.resolve: the longest, most specific kind wins a group), and each resolved
span is replaced by its kind's placeholder (`<SECRET>`, `<URL>`, `<EMAIL>`, `<HOST>`, `<IP>`,
`<NAME>`).

Properties the tests hold it to: the result never contains a found value, only placeholders;
findings carry kind and position, never the value; the same input gives the same output; and
scrubbing is idempotent — scrubbing the scrubbed text finds nothing (no detector matches a
placeholder, and a candidate that would lie inside an existing placeholder is dropped)."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from umbra.scrub.config import ScrubConfig
from umbra.scrub.findings import KINDS, PLACEHOLDERS, Finding, Span, line_starts, resolve, to_finding
from umbra.scrub.literals import is_code
from umbra.scrub.names import find_names
from umbra.scrub.patterns import find_emails, find_hosts, find_ips, find_urls
from umbra.scrub.secrets import SecretFinder

_PLACEHOLDER = re.compile("|".join(re.escape(p) for p in PLACEHOLDERS.values()))


@dataclass(frozen=True)
class ScrubResult:
    text: str  # the scrubbed text
    findings: tuple[Finding, ...] = field(default=())  # what was replaced, in text order; never the values

    def counts(self) -> dict[str, int]:
        """Findings per kind, every kind present (0 where none)."""
        found = Counter(f.kind for f in self.findings)
        return {kind: found.get(kind, 0) for kind in KINDS}


class Scrubber:
    """Finds and replaces under one `ScrubConfig` (the default config when None). Reusable and
    stateless between calls; building it loads the detect-secrets plugins once."""

    def __init__(self, config: ScrubConfig | None = None):
        self.config = config if config is not None else ScrubConfig()
        self._secrets = SecretFinder(self.config)

    def spans(self, text: str, path: str | None = None) -> list[Span]:
        """The resolved spans to replace, in text order."""
        kinds = self.config.kinds
        candidates: list[Span] = []
        if "secret" in kinds:
            candidates += self._secrets.find(text, path)
        public_paths: list[tuple[int, int]] = []
        for span, (_, host_end), internal in find_urls(text, self.config):
            if internal:
                candidates.append(span)
            else:
                public_paths.append((host_end, span.end))
        if "email" in kinds:
            candidates += find_emails(text, self.config)
        if "host" in kinds:
            candidates += find_hosts(text, self.config, public_paths, code=is_code(path))
        if "ip" in kinds:
            candidates += find_ips(text, self.config)
        if "name" in kinds:
            candidates += find_names(text)
        candidates = [c for c in candidates if c.kind in kinds]
        return resolve(_outside_placeholders(text, candidates))

    def scrub(self, text: str, path: str | None = None) -> ScrubResult:
        """The scrubbed view of `text` (`path` only picks per-file-type rules, e.g. `.env`)."""
        spans = self.spans(text, path)
        if not spans:
            return ScrubResult(text, ())
        starts = line_starts(text)
        pieces, pos = [], 0
        for span in spans:
            pieces += [text[pos:span.start], PLACEHOLDERS[span.kind]]
            pos = span.end
        pieces.append(text[pos:])
        return ScrubResult("".join(pieces), tuple(to_finding(s, starts) for s in spans))


def scrub_text(text: str, config: ScrubConfig | None = None) -> ScrubResult:
    """One-off convenience: `Scrubber(config).scrub(text)` (build a Scrubber to scrub many texts)."""
    return Scrubber(config).scrub(text)


def _outside_placeholders(text: str, candidates: list[Span]) -> list[Span]:
    """Drop candidates that lie within a placeholder already in the text (a second pass over
    scrubbed text must find nothing new)."""
    placeholders = [(m.start(), m.end()) for m in _PLACEHOLDER.finditer(text)]
    if not placeholders:
        return candidates
    return [c for c in candidates if not any(a <= c.start and c.end <= b for a, b in placeholders)]
