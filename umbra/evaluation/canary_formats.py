"""The value formats of the canaries (umbra/evaluation/canaries.py): how to draw a value, how many
values a format has, and a regex that finds its values in generated text.

Formats of the scrubbable kinds (umbra.scrub recognises each):

    stripe | aws | github   api keys: a fixed prefix and a random alphanumeric tail
    host                    <role>-<nn>.corp.<org>.internal
    email                   <first>.<last>@<org>.example

Formats of the kinds a rule-based scrubber cannot recognise — an organization's knowledge that is
sensitive without looking like a credential, a host or an address:

    codename                <adjective>-<animal>, an internal project's codename ("amber-heron")
    account                 <prefix>-<5 digits>, a customer or partner account number ("CUST-04821")

The last two are words and digits of moderate entropy (1,600 and 700,000 values): no keyword, no
entropy threshold, no domain marks them, yet a model trained on the file can learn them."""

from __future__ import annotations

import random
import re
import string

from umbra.errors import ConfigError

_ALNUM = string.ascii_letters + string.digits
_UPPER_ALNUM = string.ascii_uppercase + string.digits
# api-key formats: (fixed prefix, alphabet, random length)
KEY_FORMATS = {"stripe": ("sk_live_", _ALNUM, 24), "aws": ("AKIA", _UPPER_ALNUM, 16),
               "github": ("ghp_", _ALNUM, 36)}
HOST_ROLES = ("build", "ci", "db", "cache", "auth", "api", "queue", "search", "metrics", "vault", "ldap", "git",
              "mail", "proxy", "backup", "storage", "billing", "deploy", "etl", "kafka", "redis", "mongo", "jenkins",
              "grafana")
FIRST = ("alice", "bruno", "chen", "dana", "emeka", "farah", "goran", "hana", "ivan", "julia", "kofi", "lena",
         "marco", "nadia", "omar", "priya", "quinn", "rosa", "sven", "tomas", "uma", "vera", "wei", "yusuf", "zara",
         "anton", "beatriz", "carlos", "dmitri", "elif", "felix", "greta", "hugo", "ines", "jonas", "kira")
LAST = ("novak", "okafor", "schmidt", "tanaka", "moreau", "silva", "kowalski", "haddad", "jensen", "rossi",
        "nguyen", "petrov", "garcia", "fischer", "larsen", "kim", "mendes", "dubois", "yilmaz", "costa", "weber",
        "sato", "ortiz", "berg", "lund", "varga", "horvat", "ali", "meyer", "brandt", "keller", "romero")
CODENAME_ADJECTIVES = ("amber", "azure", "bold", "brisk", "calm", "cobalt", "coral", "crimson", "dusky", "ember",
                       "fallow", "frosty", "gentle", "golden", "granite", "hollow", "indigo", "ivory", "jade",
                       "lunar", "maple", "misty", "noble", "ochre", "olive", "pale", "quiet", "rapid", "rustic",
                       "scarlet", "silent", "silver", "solar", "stormy", "swift", "tawny", "velvet", "violet",
                       "wild", "zesty")
CODENAME_ANIMALS = ("badger", "bison", "condor", "coyote", "crane", "dingo", "falcon", "ferret", "gecko", "heron",
                    "ibex", "jackal", "jaguar", "kestrel", "koala", "lemur", "lynx", "marten", "mink", "moose",
                    "narwhal", "ocelot", "osprey", "otter", "panther", "pelican", "puffin", "quail", "raven",
                    "salmon", "stoat", "tapir", "toucan", "urchin", "viper", "walrus", "weasel", "wombat", "yak",
                    "zebra")
ACCOUNT_PREFIXES = ("CUST", "ACCT", "PRTN", "CLNT", "TNT", "CTR", "VND")
ACCOUNT_DIGITS = 5

SCRUBBABLE_FORMATS = ("stripe", "aws", "github", "host", "email")
UNSCRUBBABLE_FORMATS = ("codename", "account")


def _words(words) -> str:
    return "|".join(sorted(map(re.escape, words), key=lambda w: (-len(w), w)))


def format_space(fmt: str, org: str = "acme") -> int:
    """How many distinct values a format has."""
    if fmt in KEY_FORMATS:
        _, alphabet, n = KEY_FORMATS[fmt]
        return len(alphabet) ** n
    if fmt == "host":
        return len(HOST_ROLES) * 99
    if fmt == "email":
        return len(FIRST) * len(LAST)
    if fmt == "codename":
        return len(CODENAME_ADJECTIVES) * len(CODENAME_ANIMALS)
    if fmt == "account":
        return len(ACCOUNT_PREFIXES) * 10 ** ACCOUNT_DIGITS
    raise ConfigError(f"unknown canary format {fmt!r}")


def format_pattern(fmt: str, org: str = "acme") -> re.Pattern:
    """A regex matching every value of the format (to scan generated text for them)."""
    o = re.escape(org)
    if fmt in KEY_FORMATS:
        prefix, alphabet, n = KEY_FORMATS[fmt]
        cls = "A-Z0-9" if alphabet == _UPPER_ALNUM else "A-Za-z0-9"
        return re.compile(rf"{re.escape(prefix)}[{cls}]{{{n}}}(?![{cls}])")
    if fmt == "host":
        return re.compile(rf"[a-z]+-\d{{2}}\.corp\.{o}\.internal")
    if fmt == "email":
        return re.compile(rf"[a-z]+\.[a-z]+@{o}\.example")
    if fmt == "codename":
        return re.compile(rf"(?<![A-Za-z0-9_-])(?:{_words(CODENAME_ADJECTIVES)})-(?:{_words(CODENAME_ANIMALS)})"
                          rf"(?![A-Za-z0-9_-])")
    if fmt == "account":
        return re.compile(rf"(?<![A-Za-z0-9_-])(?:{_words(ACCOUNT_PREFIXES)})-\d{{{ACCOUNT_DIGITS}}}(?![A-Za-z0-9_-])")
    raise ConfigError(f"unknown canary format {fmt!r}")


def draw_value(fmt: str, org: str, rng: random.Random) -> str:
    if fmt in KEY_FORMATS:
        prefix, alphabet, n = KEY_FORMATS[fmt]
        return prefix + "".join(rng.choice(alphabet) for _ in range(n))
    if fmt == "host":
        return f"{rng.choice(HOST_ROLES)}-{rng.randint(1, 99):02d}.corp.{org}.internal"
    if fmt == "email":
        return f"{rng.choice(FIRST)}.{rng.choice(LAST)}@{org}.example"
    if fmt == "codename":
        return f"{rng.choice(CODENAME_ADJECTIVES)}-{rng.choice(CODENAME_ANIMALS)}"
    if fmt == "account":
        return f"{rng.choice(ACCOUNT_PREFIXES)}-{rng.randrange(10 ** ACCOUNT_DIGITS):0{ACCOUNT_DIGITS}d}"
    raise ConfigError(f"unknown canary format {fmt!r}")


def draw_values(fmt: str, org: str, n: int, rng: random.Random, exclude: set[str] = frozenset()) -> list[str]:
    """`n` distinct values of a format, none in `exclude` (ConfigError if the format has too few)."""
    if n < 0 or n > format_space(fmt, org) - len(exclude):
        raise ConfigError(f"cannot draw {n} distinct {fmt} values (the format has {format_space(fmt, org)})")
    seen: set[str] = set()
    out: list[str] = []
    while len(out) < n:
        v = draw_value(fmt, org, rng)
        if v not in seen and v not in exclude:
            seen.add(v)
            out.append(v)
    return out
