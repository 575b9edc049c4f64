"""`umbra scrub PATH... --out DIR`: write scrubbed copies of source files (umbra/scrub/) — secrets,
e-mail addresses, IPs, internal hosts and URLs, personal names replaced by typed placeholders —
mirroring the input tree under DIR, with a per-kind summary and a JSON report. Inputs are never
modified; nothing found is ever printed, only kinds, counts and positions."""

from __future__ import annotations

from pathlib import Path


def register(subparsers) -> None:
    p = subparsers.add_parser("scrub", help="write scrubbed copies of code (secrets, e-mails, IPs, hosts, URLs, names)")
    p.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="files or directories to scrub")
    p.add_argument("--out", required=True, type=Path, metavar="DIR",
                   help="where the scrubbed copies go (mirrors the inputs; must not lie inside one)")
    p.add_argument("--report", type=Path, metavar="FILE",
                   help="the JSON report (default: DIR/scrub-report.json)")
    p.add_argument("--internal-domain", action="append", default=[], metavar="DOMAIN",
                   help="an organization domain whose hosts and URLs are internal (repeatable), e.g. corp.example")
    p.set_defaults(func=_run)


def _run(args) -> int:
    from umbra.errors import ConfigError

    raise ConfigError("umbra scrub is not built yet")
