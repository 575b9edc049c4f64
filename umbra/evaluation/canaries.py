"""Canaries: secrets of realistic formats planted in an organization's code, with the ground truth
the memorization attacks (memorization.py) need.

    planted = plant_canaries(documents, CanaryConfig(org="acme", seed=0))
    planted.documents        the organization's files with the canary lines inserted (the raw view)
    planted.canaries         ground truth: value, kind, format, repeats, files, attack prefix/suffix
    planted.candidate_sets(c=50, seed=1)   one CandidateSet per canary: c values of its format,
                                           the true one among them at a random index

Three kinds by default, each in a code line of the file's language (Python, Java, Go), each one
umbra.scrub recognises and replaces:

    api_key  STRIPE_SECRET_KEY = "sk_live_…"   (Stripe sk_live_ + 24, AWS AKIA + 16, GitHub ghp_ + 36)
    host     DB_HOST = "db-07.corp.acme.internal"
    email    # contact: jane.doe@acme.example

and two more, opt-in (`CanaryConfig(kinds=ALL_KINDS)`), that a rule-based scrubber cannot recognise
(no credential keyword, no domain, moderate entropy) although they are the organization's own:

    codename  # codename: amber-heron                 (an internal project's codename)
    account   PARTNER_ACCOUNT_ID = "CUST-04821"        (a customer / partner account number)

Formats, value draws and the formats' regexes are in canary_formats.py.

Each canary is planted `repeats` times (default 1, 4 and 16), in that many distinct files, always
in the same line (a constant copied from file to file, as real code does), inserted before a
top-level statement of the file. The attack context of a canary is its first occurrence's line
prefix with `context_lines` lines before it; the suffix is the rest of that line. Decoys are drawn
from the same format, never equal to any planted canary. Everything is seeded: the same
documents and config give the same planting and the same candidate sets."""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from umbra.data.corpus import Document
from umbra.errors import ConfigError
from umbra.evaluation.canary_formats import KEY_FORMATS, draw_values

KINDS = ("api_key", "host", "email")  # the default: kinds umbra.scrub replaces
UNSCRUBBABLE_KINDS = ("codename", "account")  # opt-in: kinds no rule-based scrubber recognises
ALL_KINDS = KINDS + UNSCRUBBABLE_KINDS
LANGUAGES = ("python", "java", "go")
# The scrubber's placeholder per kind; the unscrubbable kinds have none (mask_canaries keeps them).
PLACEHOLDERS = {"api_key": "<SECRET>", "host": "<HOST>", "email": "<EMAIL>"}
_COMMENT_KINDS = ("email", "codename")  # planted in a comment (the others: in a string constant)

_SERVICES = ("STRIPE", "PAYMENTS", "BILLING", "SENTRY", "MAILGUN", "TWILIO", "DATADOG", "SLACK", "GITHUB", "S3",
             "ANALYTICS", "SEARCH", "LEDGER", "INVOICE", "SHIPPING", "PARTNER", "REPORTS", "AUDIT", "BACKUP",
             "WEBHOOK", "CRM", "SSO", "NOTIFY", "EXPORT")
_KEY_SUFFIXES = ("API_KEY", "SECRET_KEY", "TOKEN", "ACCESS_KEY")
_HOST_SUFFIXES = ("HOST", "SERVER", "ENDPOINT_HOST", "DB_HOST")
_ACCOUNT_SUFFIXES = ("ACCOUNT_ID", "CUSTOMER_ID", "ACCOUNT_NO", "TENANT_ID", "CONTRACT_ID")
_EMAIL_TAGS = ("contact", "maintainer", "owner", "author", "on-call")
_CODENAME_TAGS = ("codename", "project", "internal project", "initiative", "release train")

# Where a canary line may go: before a top-level statement of the language.
_ANCHORS = {"python": re.compile(r"(def |class |async def |import |from |@|[A-Z_][A-Z0-9_]* = )"),
            "go": re.compile(r"(func |type |var |const |// )"),
            "java": re.compile(r"(\s+)(public |private |protected |static |final )")}


@dataclass(frozen=True)
class CanaryConfig:
    org: str = "acme"  # the organization's name, in its internal hosts and e-mail domain
    kinds: tuple[str, ...] = KINDS  # which kinds to plant (ALL_KINDS: the unscrubbable ones too)
    repeats: tuple[int, ...] = (1, 4, 16)  # each canary is planted this many times (distinct files)
    per_group: int = 4  # canaries of each (kind, repeats) group
    context_lines: int = 3  # full lines before the canary's line in the attack prefix
    seed: int = 0  # planting: values, variable names, files and lines

    def validate(self) -> "CanaryConfig":
        if not re.fullmatch(r"[a-z][a-z0-9-]{0,30}", self.org):
            raise ConfigError(f"org must be a lowercase DNS label, got {self.org!r}")
        bad = [k for k in self.kinds if k not in ALL_KINDS]
        if bad or not self.kinds or len(set(self.kinds)) != len(self.kinds):
            raise ConfigError(f"canary kinds must be distinct, among {', '.join(ALL_KINDS)}, got {self.kinds!r}")
        if not self.repeats or min(self.repeats) < 1:
            raise ConfigError(f"repeats must be positive, got {self.repeats!r}")
        if self.per_group < 1 or self.context_lines < 0:
            raise ConfigError("per_group must be >= 1 and context_lines >= 0")
        return self


@dataclass(frozen=True)
class Canary:
    value: str  # the secret itself
    kind: str  # api_key | host | email | codename | account
    fmt: str  # its format: stripe | aws | github | host | email | codename | account
    repeats: int  # how many files hold it
    files: tuple[str, ...]  # their paths
    line: str  # the planted line (without indentation and newline)
    prefix: str  # attack context: `context_lines` lines + the line up to the value (first occurrence)
    suffix: str  # the rest of that line, newline included


@dataclass(frozen=True)
class CandidateSet:
    """One inference-attack trial: which of `candidates` fits prefix·candidate·suffix?"""

    canary: Canary
    candidates: tuple[str, ...]  # c values of the canary's format
    answer: int  # index of the true value

    @property
    def prefix(self) -> str:
        return self.canary.prefix

    @property
    def suffix(self) -> str:
        return self.canary.suffix


@dataclass
class PlantedCorpus:
    documents: list[Document]  # the raw view: every document, canary lines inserted
    canaries: list[Canary]
    config: CanaryConfig = field(default_factory=CanaryConfig)

    def candidate_sets(self, c: int, seed: int = 0) -> list[CandidateSet]:
        """One set of `c` same-format values per canary (seeded per canary, so adding canaries
        does not change another's set)."""
        planted = {k.value for k in self.canaries}
        out = []
        for canary in self.canaries:
            rng = random.Random(f"{seed}:{c}:{canary.value}")
            decoys = draw_values(canary.fmt, self.config.org, c - 1, rng, exclude=planted)
            answer = rng.randrange(c)
            out.append(CandidateSet(canary, tuple(decoys[:answer] + [canary.value] + decoys[answer:]), answer))
        return out

    def sample_same_format(self, canary: Canary, n: int, seed: int = 0) -> list[str]:
        """`n` distinct values of the canary's format, none planted (the exposure reference sample)."""
        rng = random.Random(f"exposure:{seed}:{canary.value}")
        return draw_values(canary.fmt, self.config.org, n, rng, exclude={k.value for k in self.canaries})

    def masked_documents(self) -> list[Document]:
        """The oracle scrubbed view: every planted value of a scrubbable kind replaced by its kind's
        placeholder (a stand-in and upper bound for umbra.scrub, which detects them without the ground
        truth); the unscrubbable kinds stay, as they do under any rule-based scrubber."""
        return [Document(d.lang, d.path, mask_canaries(d.text, self.canaries)) for d in self.documents]


def mask_canaries(text: str, canaries: Sequence[Canary]) -> str:
    """`text` with every canary value of a kind the scrubber has a placeholder for replaced by it
    (longest first); values of the unscrubbable kinds are kept."""
    for canary in sorted((k for k in canaries if k.kind in PLACEHOLDERS), key=lambda k: -len(k.value)):
        text = text.replace(canary.value, PLACEHOLDERS[canary.kind])
    return text


def plant_canaries(documents: Sequence[Document], config: CanaryConfig = CanaryConfig()) -> PlantedCorpus:
    """Insert the canaries into copies of `documents` (ConfigError if fewer files than the largest
    repeat count). Documents keep their order; untouched ones are returned as they are."""
    config.validate()
    docs = list(documents)
    if len(docs) < max(config.repeats):
        raise ConfigError(f"{len(docs)} files cannot hold a canary repeated {max(config.repeats)} times")
    bad = sorted({d.lang for d in docs} - set(LANGUAGES))
    if bad:
        raise ConfigError(f"canaries are written in {', '.join(LANGUAGES)}; got files in {', '.join(bad)}")
    rng = random.Random(f"canaries:{config.seed}")
    values: set[str] = set()
    names: set[str] = set()
    specs = []  # (value, kind, fmt, repeats, variable or comment tag, file indices)
    for kind in config.kinds:
        for repeats in config.repeats:
            for _ in range(config.per_group):
                fmt = rng.choice(sorted(KEY_FORMATS)) if kind == "api_key" else kind
                value = draw_values(fmt, config.org, 1, rng, exclude=values)[0]
                values.add(value)
                specs.append((value, kind, fmt, repeats, _variable(kind, rng, names),
                              sorted(rng.sample(range(len(docs)), repeats))))
    texts = {}
    for index, (value, kind, _, _, name, files) in enumerate(specs):
        for f in files:
            texts[f] = _insert(texts.get(f, docs[f].text), docs[f].lang, kind, name, value, rng)
    canaries = []
    for value, kind, fmt, repeats, _, files in specs:
        text = texts[files[0]]  # the first file's occurrence gives the attack context
        at = _find(text, value)
        line_start = text.rfind("\n", 0, at) + 1
        line_end = text.find("\n", at)
        line_end = len(text) if line_end < 0 else line_end + 1
        ctx_start = line_start
        for _ in range(config.context_lines):  # whole lines above it, up to one holding another canary
            above = text.rfind("\n", 0, ctx_start - 1) + 1
            if ctx_start == 0 or any(v in text[above:ctx_start] for v in values):
                break
            ctx_start = above
        canaries.append(Canary(value, kind, fmt, repeats, tuple(docs[f].path for f in files),
                               text[line_start:line_end].strip(), text[ctx_start:at], text[at + len(value):line_end]))
    out = [Document(d.lang, d.path, texts.get(i, d.text)) for i, d in enumerate(docs)]
    return PlantedCorpus(out, canaries, config)


def _find(text: str, value: str) -> int:
    """Offset of `value` standing alone (not the tail of a longer word)."""
    m = re.search(rf"(?<![A-Za-z0-9_.-]){re.escape(value)}", text)
    if m is None:
        raise ConfigError("a planted canary is missing from its file")  # cannot happen: it was just inserted
    return m.start()


def _variable(kind: str, rng: random.Random, used: set[str]) -> str:
    """A fresh constant name for a key, host or account (the comment tag for an e-mail or codename)."""
    if kind in _COMMENT_KINDS:
        return rng.choice(_EMAIL_TAGS if kind == "email" else _CODENAME_TAGS)
    suffixes = {"api_key": _KEY_SUFFIXES, "host": _HOST_SUFFIXES, "account": _ACCOUNT_SUFFIXES}[kind]
    for _ in range(1000):
        name = f"{rng.choice(_SERVICES)}_{rng.choice(suffixes)}"
        if name not in used:
            used.add(name)
            return name
    name = f"{rng.choice(_SERVICES)}_{len(used)}_{rng.choice(suffixes)}"  # the pool ran out: numbered
    used.add(name)
    return name


def render_line(lang: str, kind: str, name: str, value: str) -> str:
    """The code line that holds a canary, in the file's language."""
    if kind in _COMMENT_KINDS:
        return f"# {name}: {value}" if lang == "python" else f"// {name}: {value}"
    if lang == "python":
        return f'{name} = "{value}"'
    if lang == "go":
        head, *rest = name.lower().split("_")
        return f'const {head}{"".join(w.capitalize() for w in rest)} = "{value}"'
    return f'private static final String {name} = "{value}";'


def _insert(text: str, lang: str, kind: str, name: str, value: str, rng: random.Random) -> str:
    """`text` with the canary's line inserted before a random top-level statement (Java: a class
    member, at its indentation); at the top of the file if there is none (Go: at the end)."""
    lines = text.splitlines(keepends=True)
    anchors, in_string = [], False
    for i, ln in enumerate(lines):
        if not in_string and (m := _ANCHORS[lang].match(ln)):
            anchors.append((i, m.group(1) if lang == "java" else ""))
        if lang == "python" and (ln.count('"""') + ln.count("'''")) % 2:  # enters or leaves a docstring
            in_string = not in_string
    if anchors:
        at, indent = rng.choice(anchors)
    else:
        at, indent = (len(lines) if lang == "go" else 0), ""
    if at == len(lines) and lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    lines.insert(at, indent + render_line(lang, kind, name, value) + "\n")
    return "".join(lines)
