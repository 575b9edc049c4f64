"""The scrubbed view of code (SecureGate's masked view): secrets, e-mail addresses, IP addresses,
internal hosts and URLs, and personal names replaced by typed placeholders, with a report.

    from umbra.scrub import Scrubber, ScrubConfig
    view = Scrubber(ScrubConfig(internal_domains=("acme.com",))).scrub(code, path="app/db.py").text

Modules: config (ScrubConfig), findings (kinds, placeholders, Finding, overlap resolution),
secrets (detect-secrets' plugins), credentials (rules for what no plugin finds whole: PEM blocks,
connection strings, credential assignments), filetypes (keyword regexes per file type), patterns
(e-mails, IPs, hosts, URLs), literals (strings and comments of code), names (author tags,
copyright holders, trailers, TODO(name)), scrubber (Scrubber, ScrubResult, scrub_text), report
(the JSON report), tree (scrub files and directories into a mirror), errors."""

from umbra.scrub.config import ScrubConfig
from umbra.scrub.errors import ScrubConfigError, ScrubError, ScrubInputError
from umbra.scrub.findings import KINDS, PLACEHOLDERS, Finding
from umbra.scrub.scrubber import Scrubber, ScrubResult, scrub_text

__all__ = [
    "KINDS", "PLACEHOLDERS", "Finding", "ScrubConfig", "ScrubConfigError", "ScrubError", "ScrubInputError",
    "ScrubResult", "Scrubber", "scrub_text",
]
