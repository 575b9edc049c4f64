"""Network identifiers in text: e-mail addresses, IPv4 and IPv6 addresses, internal host names
and internal URLs, each proposed as a candidate `Span` (resolution is `findings.resolve`'s job).

What counts, with the config's defaults (umbra/scrub/config.py):
- an e-mail address is `local@domain.tld` (letters in the TLD), outside the allowed example
  domains; `git@github.com:org/repo` (an scp-style remote, followed by `:path`) is not one;
- an IP address is a valid dotted quad or IPv6 literal (Python's `ipaddress` decides) in a
  private range (or any range with `ip_scope="all"`), outside `allow_ips`, and not a version
  (`version = "10.0.0.1"`, `v10.1.2.3`);
- a host is a dotted name (all lower or all upper case) ending in an internal suffix or organization domain, that is
  not an attribute chain being called (`threading.local()`), nor a Java package or import;
- a URL (`scheme://...`, `jdbc:...` too) is replaced whole when its host is internal: an internal
  name, a private IP, or a single label other than localhost (`http://jenkins:8080/`). Hosts
  that merely appear in the path of a public URL are left to that URL (kept)."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator

from umbra.scrub.config import ScrubConfig
from umbra.scrub.findings import Span
from umbra.scrub.literals import LiteralMap

PRIVATE_NETWORKS = tuple(ipaddress.ip_network(n) for n in (
    "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16",  # RFC 1918
    "100.64.0.0/10",  # carrier-grade NAT (RFC 6598)
    "169.254.0.0/16",  # IPv4 link-local
    "fc00::/7",  # IPv6 unique local
    "fe80::/10",  # IPv6 link-local
))

_EMAIL = re.compile(
    r"(?<![\w.%+\\-])[A-Za-z0-9](?:[A-Za-z0-9._%+-]{0,62}[A-Za-z0-9_%+-])?"
    r"@((?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,63})(?![\w-]|\.[A-Za-z0-9])"
)
_SCP_REMOTE = re.compile(r":[\w~/.-]")  # `git@host:org/repo.git` after the address
_IN_AUTHORITY = re.compile(r"://[^\s/@'\"<>]*$")
_CODE_RECEIVERS = frozenset({"self", "cls", "this", "super"})  # `x@self.weight` is a matrix product
# Dotted names that start like these are code, not hosts: receivers, reverse-DNS packages
# (`com.acme.internal`, `jdk.internal`), and modules whose class is `local` (`threading.local`).
_NOT_HOST_FIRST_LABELS = _CODE_RECEIVERS | {"com", "org", "net", "io", "java", "javax", "jdk", "sun", "android",
                                            "androidx", "kotlin", "threading", "py", "werkzeug", "asgiref"}

_IPV4 = re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?![\w]|\.\d)")
_IPV6 = re.compile(r"(?<![\w:.%])(?=[0-9A-Fa-f.]*:[0-9A-Fa-f.]*:)[0-9A-Fa-f:.]{2,45}(?![\w:])")
# The identifier just before a literal names a version: `version = "10.0.0.1"`, `"release": "..."`.
_VERSION_BEFORE = re.compile(r"(?i)(?:version|release|(?<![a-z])ver)(?:_?(?:str|string|num|number|no|info))?_*\W{0,6}$")

_URL = re.compile(r"(?<![\w.+-])(?:jdbc:)?([A-Za-z][A-Za-z0-9+.-]{0,30})://([^\s'\"<>`(){}\\^|]+)")
_URL_TRAILING = ".,;:!?'\"])}>*"
# Schemes whose "host" is not a network host (a bucket, a path): never internal by being one label.
_NON_NETWORK_SCHEMES = frozenset({"file", "s3", "s3a", "s3n", "gs", "gcs", "abfs", "abfss", "az", "wasb", "wasbs",
                                  "data", "urn", "about", "chrome", "resource", "jar", "classpath", "mem", "memory"})
_LABEL = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")

_JAVA_DECL = re.compile(r"(?m)^\s*(?:package|import|exports|opens|requires|uses|provides|module)\s")


def find_emails(text: str, config: ScrubConfig) -> Iterator[Span]:
    for m in _EMAIL.finditer(text):
        domain = m.group(1).lower()
        if config.is_allowed_domain(domain) or domain.split(".", 1)[0] in _CODE_RECEIVERS:
            continue
        if _SCP_REMOTE.match(text, m.end()) or _IN_AUTHORITY.search(_line_prefix(text, m.start(), 200)):
            continue  # `git@host:repo`; `scheme://user:pass@host` (its credentials are a secret)
        yield Span(m.start(), m.end(), "email")


def find_ips(text: str, config: ScrubConfig) -> Iterator[Span]:
    for regex in (_IPV4, _IPV6):
        for m in regex.finditer(text):
            literal = m.group(0).rstrip(".")
            address = parse_ip(literal)
            if address is None or not reportable_ip(address, config):
                continue
            if _VERSION_BEFORE.search(_line_prefix(text, m.start(), 40)):
                continue
            yield Span(m.start(), m.start() + len(literal), "ip")


def _line_prefix(text: str, pos: int, limit: int) -> str:
    """Up to `limit` characters before `pos` on its line."""
    return text[max(text.rfind("\n", 0, pos) + 1, pos - limit):pos]


def parse_ip(literal: str):
    """The address `literal` spells (IPv4 or IPv6, zone id dropped), or None."""
    try:
        address = ipaddress.ip_address(literal.split("%", 1)[0])
    except ValueError:
        return None
    if address.version == 6 and literal.count(":") < 2:
        return None
    return address


def reportable_ip(address, config: ScrubConfig) -> bool:
    """Replace this address under the config's scope and allow-list."""
    if address.version == 6 and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if config.is_allowed_ip(address):
        return False
    if config.ip_scope == "all":
        return True
    return any(address.version == n.version and address in n for n in PRIVATE_NETWORKS)


def find_urls(text: str, config: ScrubConfig) -> Iterator[tuple[Span, tuple[int, int], bool]]:
    """Every URL: (its span, its host's [start, end), whether it is internal). Only the internal
    ones are replaced; the others tell `find_hosts` which names belong to a public URL's path."""
    for m in _URL.finditer(text):
        end = m.end()
        while end > m.start(2) and text[end - 1] in _URL_TRAILING and not _closes_bracket(text, m.start(2), end):
            end -= 1
        if end <= m.start(2):
            continue
        scheme = m.group(1).lower()
        rest_start = m.start(2)
        authority_end = _authority_end(text, rest_start, end)
        at = text.rfind("@", rest_start, authority_end)
        host_start = at + 1 if at != -1 else rest_start
        host, host_end = _host(text, host_start, authority_end)
        if not host:
            continue
        internal = _internal_url_host(host, scheme, config)
        yield Span(m.start(), end, "url"), (host_start, host_end), internal


def _closes_bracket(text: str, start: int, end: int) -> bool:
    """A trailing ']' that closes an IPv6 literal's '[' is part of the URL."""
    return text[end - 1] == "]" and "[" in text[start:end - 1]


def _authority_end(text: str, start: int, end: int) -> int:
    for i in range(start, end):
        if text[i] in "/?#;":
            return i
    return end


def _host(text: str, start: int, end: int) -> tuple[str, int]:
    """The lower-case host of an authority's host[:port] part and where it ends."""
    if start < end and text[start] == "[":
        close = text.find("]", start, end)
        return (text[start + 1:close].lower(), close + 1) if close != -1 else ("", start)
    colon = text.find(":", start, end)
    stop = colon if colon != -1 else end
    return text[start:stop].lower().rstrip("."), stop


def _internal_url_host(host: str, scheme: str, config: ScrubConfig) -> bool:
    address = parse_ip(host)
    if address is not None:
        return reportable_ip(address, config)
    if config.is_allowed_domain(host):
        return False
    if config.is_internal_host(host):
        return True
    return (
        config.single_label_urls_internal
        and "." not in host
        and host not in config.placeholder_hosts
        and scheme not in _NON_NETWORK_SCHEMES
        and bool(_LABEL.match(host))
        and not host.isdigit()
    )


def find_hosts(text: str, config: ScrubConfig, public_url_paths: list[tuple[int, int]],
               code: bool = True) -> Iterator[Span]:
    """Internal host names, except inside `public_url_paths` (the path part of URLs kept as
    public). In code (`code=True`) only in string literals and comments, and never a call
    (`threading.local()`), an rST literal (``py.path.local``), a Javadoc tag (`@xerces.internal`),
    the local part of an e-mail address, or a Java package / import."""
    regex = _host_regex(config)
    if regex is None:
        return
    literals = None
    for m in regex.finditer(text):
        start, end = m.start(), m.end()
        if text[end:end + 1] in ("(", "@", "`") or text[start - 1:start] in ("@", "`"):
            continue
        if _inside(start, public_url_paths):
            continue
        line_start = text.rfind("\n", 0, start) + 1
        if _JAVA_DECL.match(text, line_start) or m.group(0).split(".", 1)[0].lower() in _NOT_HOST_FIRST_LABELS:
            continue
        host = m.group(0)
        if host not in (host.lower(), host.upper()) or not config.is_internal_host(host.lower()):
            continue  # `Outer.Internal` is a class; DB01.CORP and db01.corp are hosts
        if code:
            literals = literals or LiteralMap(text)
            if not literals.contains(start):
                continue
        yield Span(start, end, "host")


_HOST_REGEX_CACHE: dict[tuple, re.Pattern | None] = {}


def _host_regex(config: ScrubConfig) -> re.Pattern | None:
    key = (config.internal_suffixes, config.internal_domains)
    if key not in _HOST_REGEX_CACHE:
        label = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\."
        # A suffix needs a name in front of it ("local" alone is a word); a domain is a host itself.
        forms = [f"(?:{label})+(?:{_alternatives(s.lstrip('.') for s in config.internal_suffixes)})",
                 f"(?:{label})*(?:{_alternatives(config.internal_domains)})"]
        forms = [f for f, tails in zip(forms, (config.internal_suffixes, config.internal_domains)) if tails]
        _HOST_REGEX_CACHE[key] = (
            re.compile(r"(?i)(?<![\w.-])(?:" + "|".join(forms) + r")(?![\w-]|\.\w)") if forms else None
        )
    return _HOST_REGEX_CACHE[key]


def _alternatives(names) -> str:
    return "|".join(re.escape(n) for n in sorted(set(names), key=len, reverse=True))


def _inside(pos: int, ranges: list[tuple[int, int]]) -> bool:
    return any(a <= pos < b for a, b in ranges)
