"""Credentials no detect-secrets plugin finds whole, as rules (secrets.py runs the plugins):

- a PEM private key, replaced as one block from BEGIN to END — also inside a string with `\\n`
  escapes or split over concatenated literals — or, when its END is missing, through its base64
  body (a header alone, as in a parser testing for one, is not a key);
- a URL's `user:password@` (the user too: half of the credential, often a person's name), and
  `password=` / `pwd=` parameters in JDBC, ODBC and query strings;
- a quoted value assigned to, or paired in a call with, a credential name where the keyword
  detector's file-type regexes do not reach: typed defaults (`password: str = "..."`), Go struct
  fields (`Password: "..."`), `setProperty("password", "...")`, `pass` names (`ADMIN_PASS`), and
  `token` / `credential` names it does not list; in config files, unquoted values, also ones
  starting with a symbol;
- `Bearer <token>` and `Basic <base64 of user:password>` values; fine-grained GitHub tokens.

A password-named value counts from 3 characters; a token-, secret- or key-named one must look
generated (16+ characters, mixed, see `random_looking`). Templates (`%s`, `{x}`, `${X}`, `$X`,
`<user>`) and messages with spaces never count."""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections import Counter
from collections.abc import Iterator

from detect_secrets.filters import heuristic

from umbra.scrub.findings import PLACEHOLDERS, Span

_PEM = re.compile(
    r"-----BEGIN ((?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?)-----[\s\S]{0,20000}?-----END \1-----"
)
_PEM_HEADER = re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")
# A truncated key's body: the rest of the header's line and following lines of base64, header
# fields ("Proc-Type: 4,ENCRYPTED"), string quotes, `\n` escapes and concatenation.
_PEM_BODY_LINE = re.compile(r"[ \t\"'+,;()\\A-Za-z0-9/=:-]*")

_USERINFO = re.compile(r"(?i)\b[a-z][a-z0-9+.-]{0,30}://([^\s/@:'\"<>{}`]*):([^\s/@'\"<>{}`]+)@")
_PARAM_PASSWORD = re.compile(r"(?i)[;?&\"']\s*(?:password|passwd|pwd|pass)\s*=\s*([^;&'\"\s<>{}]+)")
# A short `pass` counts as a word of its own: ADMIN_PASS, db-pass, adminPass (not bypass, compass).
_PASS = r"(?:(?<![A-Za-z])pass|(?-i:(?<=[a-z])Pass))(?![a-z])"
_CREDENTIAL_NAME = (r"[\w.-]*(?:passw(?:or)?d|passphrase|pwd|" + _PASS + r"|secret|token|api[_-]?key|apikey|"
                    r"access[_-]?key|auth[_-]?key|private[_-]?key|signing[_-]?key|credentials?)[\w-]*")
_ASSIGNED = re.compile(
    r"(?i)(?<![\w.-])(" + _CREDENTIAL_NAME + r")[\"'\]]{0,2}\s*(?::\s*[\w\[\]., |]{1,40}?\s*)?"  # name, type
    r"(?:=|:=|:|=>)\s*[rbuf]{0,2}([\"'`])([^\"'`\n]{1,400})\2"  # the quoted value
)
_CONFIG_ASSIGNED = re.compile(r"(?i)\s*(?:export\s+)?(" + _CREDENTIAL_NAME + r")\s*[:=]\s*(?![\"'`|>])(\S+)\s*$")
# A call given a credential name and its value: setProperty("password", "..."), setdefault("API_TOKEN", "...").
_PAIRED = re.compile(r"(?i)\(\s*([\"'])(" + _CREDENTIAL_NAME + r")\1\s*,\s*[rbuf]{0,2}([\"'])([^\"'\n]{1,400})\3\s*\)")
_NOT_A_VALUE = re.compile(
    r"(?i)(?:prompt|field|label|message|msg|hint|placeholder|name|type|env|var|path|file|url|uri|header|length|len|"
    r"param|policy|regex|pattern|format|fmt|error|help|title|text|input|column|attr|dir|mode|kind|method|scheme|"
    r"endpoint|id|count|size|limit|ttl|expiry|expires|timeout|store|provider|manager|class|version|"
    r"hash|hashed|sha\d*|md5|digest|checksum|fingerprint)s?$"
)
_LAST_WORD = re.compile(r"([A-Za-z_][\w-]*)[^\w]*$")
_PASSWORD_NAME = re.compile(r"(?i)passw(?:or)?d|passphrase|pwd|" + _PASS)
_AUTH_VALUE = re.compile(r"(?i)\b(bearer|basic|token)\s+([A-Za-z0-9\-._~+/]{16,}=*)")
_GITHUB_FINE_GRAINED = re.compile(r"\bgithub_pat_[A-Za-z0-9_]{50,}")
_PLACEHOLDER_VALUES = frozenset(PLACEHOLDERS.values())


def pem_blocks(text: str) -> Iterator[Span]:
    """Whole PEM private-key blocks; a header without its END runs through its base64 body."""
    covered_until = -1
    for m in _PEM_HEADER.finditer(text):
        if m.start() < covered_until:
            continue
        whole = _PEM.match(text, m.start())
        end = whole.end() if whole else _truncated_key_end(text, m.end())
        if end is not None:
            covered_until = end
            yield Span(m.start(), end, "secret")


def _truncated_key_end(text: str, header_end: int) -> int | None:
    """Where a key without its END line stops: after the last line of base64 that follows the
    header (on its own line, or after `\\n` escapes on the header's line); None if no body follows
    (a parser testing for the header is not a key)."""
    end = _PEM_BODY_LINE.match(text, header_end).end()
    has_body = _base64ish(text[header_end:end])
    while end < len(text) and text[end] == "\n":
        nxt = _PEM_BODY_LINE.match(text, end + 1).end()
        if not _base64ish(text[end + 1:nxt]):
            break
        end, has_body = nxt, True
    return end if has_body else None


def _base64ish(line: str) -> bool:
    core = line.replace("\\n", "").strip(" \t\"'+,;()\\")
    return len(core) >= 16 and sum(c.isalnum() or c in "+/=" for c in core) / len(core) > 0.9


def line_rules(line: str, offset: int, config_file: bool) -> Iterator[Span]:
    """The rules' `secret` spans on one line starting at `offset` of its text."""
    for m in _USERINFO.finditer(line):
        user, password = m.group(1), m.group(2)
        if _templated(password) or heuristic.is_not_alphanumeric_string(password):
            continue
        start = m.start(1) if user and not _templated(user) else m.start(2)
        yield Span(offset + start, offset + m.end(2), "secret")
    for m in _PARAM_PASSWORD.finditer(line):
        if not _templated(m.group(1)) and not heuristic.is_not_alphanumeric_string(m.group(1)):
            yield Span(offset + m.start(1), offset + m.end(1), "secret")
    for name_group, value_group, regex in ((1, 3, _ASSIGNED), (2, 4, _PAIRED)):
        for m in regex.finditer(line):
            if _credential_value(m.group(name_group), m.group(value_group)):
                yield Span(offset + m.start(value_group), offset + m.end(value_group), "secret")
    for m in _AUTH_VALUE.finditer(line):
        value = m.group(2)
        if m.group(1).lower() == "basic" and not _basic_credentials(value):
            continue
        if random_looking(value):
            yield Span(offset + m.start(2), offset + m.end(2), "secret")
    for m in _GITHUB_FINE_GRAINED.finditer(line):
        yield Span(offset + m.start(), offset + m.end(), "secret")


    if config_file:
        yield from _config_rules(line, offset)


def _config_rules(line: str, offset: int) -> Iterator[Span]:
    """Config files (.env, YAML, INI, properties, TOML): an unquoted value of a credential key,
    also one starting with a symbol (detect-secrets' keyword regexes want a word character first)."""
    m = _CONFIG_ASSIGNED.match(line)
    if m and _credential_value(m.group(1), m.group(2)):
        yield Span(offset + m.start(2), offset + m.end(2), "secret")


def _credential_value(name: str, value: str) -> bool:
    """`value` (quoted, assigned to or paired with credential-ish `name`) is a credential."""
    if _NOT_A_VALUE.search(name) or _templated(value) or value in _PLACEHOLDER_VALUES:
        return False
    if any(c.isspace() for c in value) or heuristic.is_not_alphanumeric_string(value):
        return False  # messages and prompts ("Enter password:"), masks ("****")
    if _PASSWORD_NAME.search(name):
        return len(value) >= 3
    return random_looking(value)


def names_a_non_value(prefix: str) -> bool:
    """The word just before a keyword hit names something other than the secret itself
    (`SECRET_NAME = "prod/db"`, `password_prompt = "..."`)."""
    m = _LAST_WORD.search(prefix)
    return bool(m and _NOT_A_VALUE.search(m.group(1)))


def random_looking(value: str) -> bool:
    """Long and mixed enough to be a generated token rather than a word or an identifier: 16+
    characters, 8+ distinct, and digits among letters or a high per-character entropy (random
    base64 of 24 characters carries about 4.2 bits per character, camel-case words about 3.4)."""
    if len(value) < 16 or len(set(value)) < 8:
        return False
    if heuristic.is_sequential_string(value) or heuristic.is_potential_uuid(value):
        return False
    letters = any(c.isalpha() for c in value)
    return (letters and any(c.isdigit() for c in value)) or _entropy(value) >= 3.8


def _entropy(value: str) -> float:
    counts = Counter(value)
    return -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())


def _basic_credentials(value: str) -> bool:
    try:
        return b":" in base64.b64decode(value + "=" * (-len(value) % 4), validate=True)
    except (binascii.Error, ValueError):
        return False


def _templated(value: str) -> bool:
    """A format string or template, not a literal: `%s`, `{name}`, `${VAR}`, `$VAR`, `<user>`."""
    return (not value or value.startswith("$") or any(t in value for t in ("%s", "%(", "{", "$("))
            or (value.startswith("<") and value.endswith(">")) or value in _PLACEHOLDER_VALUES)
