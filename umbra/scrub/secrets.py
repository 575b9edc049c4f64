"""Secrets in code: API keys, tokens, private keys, passwords and connection-string credentials,
proposed as `secret` candidate spans.

detect-secrets (1.5) does the finding where it has a detector: its format plugins (AWS, GitHub,
GitLab, Slack, Stripe, JWT, OpenAI, PyPI, npm, SendGrid, Twilio, Azure, ...), its keyword
detector (with the file type's own regexes), its entropy plugins and its false-positive
heuristics (sequential strings, UUIDs, id-named values, templates). We run the format plugins'
own regexes (`plugin.denylist`) with `finditer`, to know where each secret stands, and the
keyword and entropy plugins' `analyze_string`, rather than `scan_line`: scan_line forces eager
search (every word of a line becomes an entropy candidate: 70,000 hits on 20,000 lines of
ordinary code), fixes the file name (so the keyword detector cannot pick per-language regexes),
rewrites the process-global settings on every call and reports values, not positions. None of
these paths runs a plugin's network verification. Not used: `PrivateKeyDetector` (it flags a
header line, also in parsers that test for one; PEM blocks are credentials.py's),
`BasicAuthDetector` (its value is the password alone; credentials.py takes `user:password`) and
`IPPublicDetector` (IPs are patterns.py's, with their own placeholder).

Quoted high-entropy strings without a known format count only where the line names a credential
before them (config `entropy_needs_context`): hashes, digests and test vectors stay."""

from __future__ import annotations

import re
from collections.abc import Iterator

from detect_secrets.filters import heuristic
from detect_secrets.plugins.artifactory import ArtifactoryDetector
from detect_secrets.plugins.aws import AWSKeyDetector
from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
from detect_secrets.plugins.base import RegexBasedDetector
from detect_secrets.plugins.cloudant import CloudantDetector
from detect_secrets.plugins.discord import DiscordBotTokenDetector
from detect_secrets.plugins.github_token import GitHubTokenDetector
from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
from detect_secrets.plugins.high_entropy_strings import Base64HighEntropyString, HexHighEntropyString
from detect_secrets.plugins.ibm_cloud_iam import IbmCloudIamDetector
from detect_secrets.plugins.ibm_cos_hmac import IbmCosHmacDetector
from detect_secrets.plugins.jwt import JwtTokenDetector
from detect_secrets.plugins.keyword import KeywordDetector
from detect_secrets.plugins.mailchimp import MailchimpDetector
from detect_secrets.plugins.npm import NpmDetector
from detect_secrets.plugins.openai import OpenAIDetector
from detect_secrets.plugins.pypi_token import PypiTokenDetector
from detect_secrets.plugins.sendgrid import SendGridDetector
from detect_secrets.plugins.slack import SlackDetector
from detect_secrets.plugins.softlayer import SoftlayerDetector
from detect_secrets.plugins.square_oauth import SquareOAuthDetector
from detect_secrets.plugins.stripe import StripeDetector
from detect_secrets.plugins.telegram_token import TelegramBotTokenDetector
from detect_secrets.plugins.twilio import TwilioKeyDetector

from umbra.scrub.config import ScrubConfig
from umbra.scrub.credentials import line_rules, names_a_non_value, pem_blocks
from umbra.scrub.filetypes import keyword_table, value_is_quoted
from umbra.scrub.findings import PLACEHOLDERS, Span

FORMAT_PLUGINS = (
    ArtifactoryDetector, AWSKeyDetector, AzureStorageKeyDetector, CloudantDetector,
    DiscordBotTokenDetector, GitHubTokenDetector, GitLabTokenDetector, IbmCloudIamDetector, IbmCosHmacDetector,
    JwtTokenDetector, MailchimpDetector, NpmDetector, OpenAIDetector, PypiTokenDetector, SendGridDetector,
    SlackDetector, SoftlayerDetector, SquareOAuthDetector, StripeDetector, TelegramBotTokenDetector,
    TwilioKeyDetector,
)

_CREDENTIAL_CONTEXT = re.compile(
    r"(?i)(?:token|secret|passw|pwd|api[_-]?key|apikey|access[_-]?key|private[_-]?key|auth(?!or)|credential|bearer|"
    r"signing|session[_-]?key|client[_-]?key|(?:^|[\W_])key(?:$|[\W_]))"
)
_HASH_CONTEXT = re.compile(
    r"(?i)(?:hash|sha\d*|md5|digest|checksum|crc|commit|revision|etag|fingerprint|uuid|guid|integrity|version|"
    r"nonce|salt|vector|expected|(?:^|[\W_])(?:iv|rev|test|want|got)(?:$|[\W_]))"
)
_DELIMITERS = frozenset(" \t\"'=:")
_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-+/=")
_PLACEHOLDER_VALUES = frozenset(PLACEHOLDERS.values())


class SecretFinder:
    """The plugins and rules of one config; `find(text, path)` proposes `secret` spans."""

    def __init__(self, config: ScrubConfig):
        self.config = config
        self.format_plugins = tuple(cls() for cls in FORMAT_PLUGINS)
        self.keyword = KeywordDetector()
        self.entropy_plugins = (Base64HighEntropyString(limit=config.base64_entropy),
                                HexHighEntropyString(limit=config.hex_entropy))

    def find(self, text: str, path: str | None = None) -> Iterator[Span]:
        yield from pem_blocks(text)
        table, quotes_required = keyword_table(path)
        offset = 0
        for line in text.split("\n"):
            if line.strip():
                yield from self._line(line.rstrip("\r"), offset, table, quotes_required)
            offset += len(line) + 1

    def _line(self, line: str, offset: int, table, quotes_required: bool) -> Iterator[Span]:
        for plugin in self.format_plugins:
            jwt = isinstance(plugin, JwtTokenDetector)
            for regex in plugin.denylist:
                for m in regex.finditer(line):
                    start, end = _secret_span(line, m)
                    value = line[start:end]
                    if not value or _filtered(value, line, plugin) or (jwt and not plugin.is_formally_valid(value)):
                        continue
                    yield Span(offset + start, offset + _extend(line, end, jwt), "secret")
        for value in self.keyword.analyze_string(line, denylist_regex_to_group=table):
            if _filtered(value, line, self.keyword) or _looks_like_reference(value):
                continue
            for span in _occurrences(line, value, offset):
                at = span.start - offset
                if (not quotes_required or value_is_quoted(line, at)) and not names_a_non_value(line[:at]):
                    yield span
        for plugin in self.entropy_plugins:
            for value in plugin.analyze_string(line):
                if plugin.calculate_shannon_entropy(value) <= plugin.entropy_limit or _filtered(value, line, plugin):
                    continue
                for span in _occurrences(line, value, offset):
                    if not self.config.entropy_needs_context or _credential_context(line[:span.start - offset]):
                        yield span
        yield from line_rules(line, offset, config_file=not quotes_required)


def _secret_span(line: str, m: re.Match) -> tuple[int, int]:
    """Where a format plugin's match puts the secret: its longest group when that is the value
    (AWS's 40-character key after `aws_secret_access_key = "`), else the whole match (GitHub's
    group is only the `ghp` prefix), without the delimiters some regexes include."""
    groups = [m.span(i) for i in range(1, (m.re.groups or 0) + 1) if m.start(i) != -1]
    start, end = max(groups, key=lambda g: g[1] - g[0], default=m.span())
    if end - start < 16:
        start, end = m.span()
    while start < end and line[start] in _DELIMITERS:
        start += 1
    while end > start and line[end - 1] in _DELIMITERS:
        end -= 1
    return start, end


def _extend(line: str, end: int, jwt: bool) -> int:
    """Past the regex's end over the token's remaining characters: a Stripe key longer than the
    24 the regex asks for, a JWT's signature (the plugin's regex stops before it)."""
    while end < len(line) and (line[end] in _TOKEN_CHARS or (jwt and line[end] == ".")):
        end += 1
    return end


def _credential_context(prefix: str) -> bool:
    """The text before a quoted value on its line names a credential, not a hash or a test vector."""
    tail = prefix[-80:]
    return bool(_CREDENTIAL_CONTEXT.search(tail)) and not _HASH_CONTEXT.search(tail)


def _filtered(value: str, line: str, plugin) -> bool:
    """detect-secrets' own false-positive heuristics, and our placeholders."""
    return (
        value in _PLACEHOLDER_VALUES
        or heuristic.is_templated_secret(value)
        or heuristic.is_prefixed_with_dollar_sign(value)
        or heuristic.is_sequential_string(value)
        or heuristic.is_potential_uuid(value)
        or heuristic.is_not_alphanumeric_string(value)
        or (not isinstance(plugin, RegexBasedDetector) and heuristic.is_likely_id_string(value, line, plugin))
    )


def _looks_like_reference(value: str) -> bool:
    """A keyword detector value that is code, not a literal: `cfg.Password`, `get_pw()`, `env[...]`."""
    code = re.fullmatch(r"[A-Za-z_][\w.]*(?:\(.*|\[.*)?", value)
    return bool(code) and any(c in value for c in ".([")


def _occurrences(line: str, value: str, offset: int) -> Iterator[Span]:
    """Every whole-token occurrence of `value` on `line` (not inside a longer word)."""
    start = line.find(value)
    while start != -1:
        end = start + len(value)
        if _bounded(line, start, end, value):
            yield Span(offset + start, offset + end, "secret")
        start = line.find(value, start + 1)


def _bounded(line: str, start: int, end: int, value: str) -> bool:
    before = line[start - 1] if start else " "
    after = line[end] if end < len(line) else " "
    return not ((value[0].isalnum() and (before.isalnum() or before == "_"))
                or (value[-1].isalnum() and (after.isalnum() or after == "_")))
