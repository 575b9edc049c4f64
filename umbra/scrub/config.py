"""`ScrubConfig`: what the scrubber looks for and what it leaves alone.

The defaults are a position, stated here once:
- internal hosts are names under the private-use suffixes below (`.internal`, `.corp`, `.local`,
  `.lan`, `.intranet`, `.private`, `.home.arpa`) or under a domain the organization lists in
  `internal_domains`; a public name such as `github.com` or `pypi.org` is kept, in a host and in
  a URL (a URL is replaced when its host is internal);
- only private-range IP addresses are replaced (RFC 1918, CGNAT, link-local, IPv6 ULA and
  link-local): a public address in code (`8.8.8.8`, a test vector) names no part of the
  organization's network. `ip_scope="all"` replaces every address outside `allow_ips`;
- `localhost`, `example.com` / `.org` / `.net` (RFC 2606), loopback, the unspecified and
  broadcast addresses and the documentation ranges are never replaced.
Validation raises `ScrubConfigError`; the fields are normalised (lower case, suffixes with a
leading dot) so that every detector compares like with like."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field

from umbra.scrub.errors import ScrubConfigError
from umbra.scrub.findings import KINDS

DEFAULT_INTERNAL_SUFFIXES = (".internal", ".corp", ".local", ".lan", ".intranet", ".private", ".home.arpa")
# Only the example second-level domains: the reserved TLDs (.example, .test, .invalid) are not
# allowed, since an organization's own test data uses them too (the SecureGate evaluation's
# canaries write `jane.doe@acme.example`), and over-scrubbing an example costs nothing.
DEFAULT_ALLOW_DOMAINS = ("localhost", "example.com", "example.org", "example.net")
DEFAULT_ALLOW_IPS = (
    "127.0.0.0/8", "0.0.0.0/32", "255.255.255.255/32", "::1/128", "::/128",  # loopback, unspecified, broadcast
    "192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "2001:db8::/32",  # documentation (RFC 5737 / 3849)
)
DEFAULT_PLACEHOLDER_HOSTS = (
    "host", "hostname", "server", "servername", "testserver", "somehost", "myhost", "yourhost", "remotehost",
    "otherhost", "otherserver", "hostspec", "dsn", "mydsn", "domain", "dom", "foo", "bar", "baz", "xyz", "example",
)
IP_SCOPES = ("private", "all")

_LABEL = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")


@dataclass(frozen=True)
class ScrubConfig:
    # Which kinds are found and replaced (any subset of KINDS: secret, url, email, host, ip, name).
    kinds: frozenset[str] = frozenset(KINDS)
    # Host-name suffixes that are internal by convention (private-use names, never public DNS).
    internal_suffixes: tuple[str, ...] = DEFAULT_INTERNAL_SUFFIXES
    # The organization's own domains (e.g. "acme.com"): the domain and every name under it is internal.
    internal_domains: tuple[str, ...] = ()
    # "private": replace private-range addresses only; "all": every address outside allow_ips.
    ip_scope: str = "private"
    # Networks never replaced: loopback, unspecified, broadcast, documentation ranges.
    allow_ips: tuple[str, ...] = DEFAULT_ALLOW_IPS
    # Names (and everything under them) that are never internal hosts, URLs or e-mail domains.
    allow_domains: tuple[str, ...] = DEFAULT_ALLOW_DOMAINS
    # A URL whose host is one label (`http://jenkins:8080/`, not localhost) can only resolve
    # inside some network: replace it as internal.
    single_label_urls_internal: bool = True
    # One-label URL hosts that are placeholders in documentation and tests, not machines.
    placeholder_hosts: tuple[str, ...] = DEFAULT_PLACEHOLDER_HOSTS
    # detect-secrets' entropy limits for quoted base64 and hex strings (its own defaults).
    base64_entropy: float = 4.5
    hex_entropy: float = 3.0
    # A quoted high-entropy string with no specific format is a secret only where the line names
    # a credential before it (token, secret, key, password, auth, ...); elsewhere hashes, digests,
    # test vectors and encoded data are kept. False: every such string is a secret.
    entropy_needs_context: bool = True
    # Parsed allow_ips (derived, not set by callers).
    allow_networks: tuple = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        kinds = frozenset(self.kinds)
        unknown = sorted(kinds - set(KINDS))
        if unknown:
            raise ScrubConfigError(f"unknown scrub kind(s) {', '.join(unknown)}; kinds are {', '.join(KINDS)}")
        if self.ip_scope not in IP_SCOPES:
            raise ScrubConfigError(f"ip_scope must be one of {', '.join(IP_SCOPES)}, got {self.ip_scope!r}")
        for name in ("base64_entropy", "hex_entropy"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0.0 <= value <= 8.0:
                raise ScrubConfigError(f"{name} must be a number in [0, 8], got {value!r}")
        normalised = {
            "kinds": kinds,
            "internal_suffixes": tuple("." + _domain(s, "internal suffix") for s in self.internal_suffixes),
            "internal_domains": tuple(_domain(d, "internal domain") for d in self.internal_domains),
            "allow_domains": tuple(_domain(d, "allowed domain") for d in self.allow_domains),
            "placeholder_hosts": tuple(_domain(h, "placeholder host") for h in self.placeholder_hosts),
            "allow_networks": tuple(_network(n) for n in self.allow_ips),
        }
        for name, value in normalised.items():
            object.__setattr__(self, name, value)

    def is_internal_host(self, host: str) -> bool:
        """`host` (lower case, no port) is under an internal suffix or an organization domain,
        and not under an allowed name."""
        if self.is_allowed_domain(host):
            return False
        return any(host.endswith(s) for s in self.internal_suffixes) or any(
            host == d or host.endswith("." + d) for d in self.internal_domains
        )

    def is_allowed_domain(self, host: str) -> bool:
        return any(host == d or host.endswith("." + d) for d in self.allow_domains)

    def is_allowed_ip(self, address) -> bool:
        return any(address.version == n.version and address in n for n in self.allow_networks)


def _domain(value: str, what: str) -> str:
    """A host-name suffix in canonical form: lower case, no leading or trailing dot, valid labels."""
    if not isinstance(value, str):
        raise ScrubConfigError(f"{what} must be a string, got {value!r}")
    name = value.strip().lower().strip(".")
    if not name or not all(_LABEL.match(label) for label in name.split(".")):
        raise ScrubConfigError(f"{what} {value!r} is not a host name (labels of letters, digits and '-')")
    return name


def _network(value: str):
    try:
        return ipaddress.ip_network(value, strict=False)
    except ValueError as exc:
        raise ScrubConfigError(f"allow_ips entry {value!r} is not an IP address or network: {exc}") from None
