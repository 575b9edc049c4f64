"""How the scrubber benchmark's canaries (experiments/scrub_canaries.py) are written: the vocabulary
their values are drawn from, and a realistic line of Python, Java or Go around a value (a constant,
a keyword argument, a mapping entry, a comment)."""

from __future__ import annotations

import random
import string
from dataclasses import dataclass

LANGS = ("python", "java", "go")
ORG_DOMAIN = "northwind-labs.com"  # the organization domain the benchmark's config lists
ALNUM = string.ascii_letters + string.digits
HEX = "0123456789abcdef"
B64 = ALNUM + "+/"
FIRST = ("Alice", "Bruno", "Chen", "Dana", "Emeka", "Farah", "Goran", "Hana", "Ivan", "Julia", "Kofi", "Lena",
         "Marco", "Nadia", "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tomás", "Uma", "Vera", "Wei", "Yusuf", "Zoë",
         "José", "Beatriz", "Dmitri", "Elif", "Greta", "Søren", "Ingrid", "Kwame", "Mei", "Rahul", "Ayşe")
LAST = ("Novak", "Okafor", "Schmidt", "Tanaka", "Moreau", "Silva", "Kowalski", "Haddad", "Jensen", "Rossi",
        "Nguyen", "Petrov", "García", "Fischer", "Larsen", "Kim", "Mendes", "Dubois", "Yilmaz", "Costa", "Weber",
        "O'Brien", "Müller", "van der Berg", "Pérez-Soto", "McAllister", "de Souza", "Łukasik", "Ahmed", "Ivanova")
ROLES = ("db", "pg", "mysql", "redis", "cache", "kafka", "build", "ci", "jenkins", "git", "vault", "ldap", "auth",
         "api", "metrics", "grafana", "search", "queue", "mail", "proxy", "backup", "etl", "billing", "deploy")
ENVS = ("prod", "staging", "dev", "qa", "eu-west", "us-east", "dc1", "ops", "infra")
SUFFIXES = ("internal", "corp", "local", "lan", "intranet", "private", "home.arpa")
COMPANIES = ("globex", "initech", "umbrella-labs", "hooli", "vandelay", "stark-ind", "wayne-ent", "tyrell", "cyberdyne",
             "soylent", "wonka", "acmesoft", "oscorp", "massive-dyn", "aperture")
TLDS = ("com", "io", "net", "de", "co.uk", "fr", "org", "ai", "dev")


@dataclass
class Canary:
    kind: str  # the benchmark's kind (row of the table)
    lines: list[str]  # the planted lines (no newline)
    values: list[str]  # what must be gone: substrings of the lines
    expected: str  # the placeholder kind that should replace each value


# ---------------------------------------------------------------- rendering in the host language

def ident(words: list[str], lang: str, const: bool = True) -> str:
    if lang == "python":
        return "_".join(words).upper() if const else "_".join(words)
    if lang == "java":
        return "_".join(words).upper() if const else words[0] + "".join(w.title() for w in words[1:])
    return words[0] + "".join(w.title() for w in words[1:])


def assign(lang: str, words: list[str], value: str, rng: random.Random) -> str:
    """A string constant assigned to a variable named by `words`, in the language's own syntax."""
    if lang == "python":
        form = rng.randrange(3)
        q = rng.choice('"\'')
        if form == 0:
            return f"{ident(words, lang)} = {q}{value}{q}"
        if form == 1:
            return f"    self.{ident(words, lang, const=False)} = {q}{value}{q}"
        return f"{ident(words, lang, const=False)}: str = {q}{value}{q}"
    if lang == "java":
        if rng.random() < 0.5:
            return f"    private static final String {ident(words, lang)} = \"{value}\";"
        return f"        String {ident(words, lang, const=False)} = \"{value}\";"
    if rng.random() < 0.5:
        return f"const {ident(words, lang)} = \"{value}\""
    return f"\t{ident(words, lang)} := \"{value}\""


def call_kwarg(lang: str, func: str, name: str, value: str) -> str:
    if lang == "python":
        return f'    client = {func}(region="eu-west-1", {name}="{value}")'
    if lang == "java":
        return f'        props.setProperty("{name}", "{value}");'
    return f'\tcfg := Config{{Region: "eu-west-1", {name[0].upper() + name[1:]}: "{value}"}}'


def mapping(lang: str, key: str, value: str) -> str:
    if lang == "python":
        return f'    headers = {{"{key}": "{value}"}}'
    if lang == "java":
        return f'        headers.put("{key}", "{value}");'
    return f'\treq.Header.Set("{key}", "{value}")'


def comment(lang: str, text: str) -> str:
    return ("# " if lang == "python" else "// ") + text


def rand(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def internal_host_name(rng) -> str:
    role = f"{rng.choice(ROLES)}{rng.choice(('', '-' + str(rng.randrange(1, 40)), str(rng.randrange(1, 9))))}"
    if rng.random() < 0.25:
        return f"{role}.{rng.choice(ENVS)}.{ORG_DOMAIN}"
    middle = rng.choice(("", rng.choice(ENVS) + ".", rng.choice(ENVS) + "." + rng.choice(COMPANIES) + "."))
    return f"{role}.{middle}{rng.choice(SUFFIXES)}"
