"""`umbra scrub PATH... --out DIR`: write scrubbed copies of source files (umbra/scrub/) — secrets,
e-mail addresses, IPs, internal hosts and URLs, personal names replaced by typed placeholders —
mirroring each input under DIR/<input name>/, print a per-kind summary and write the JSON report
(default DIR/scrub-report.json). Inputs are never modified; nothing found is ever printed, only
kinds, counts and positions."""

from __future__ import annotations

from pathlib import Path

REPORT_NAME = "scrub-report.json"


def register(subparsers) -> None:
    p = subparsers.add_parser("scrub", help="write scrubbed copies of code (secrets, e-mails, IPs, hosts, URLs, names)")
    p.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="files or directories to scrub")
    p.add_argument("--out", required=True, type=Path, metavar="DIR",
                   help="where the scrubbed copies go, as DIR/<input name>/... (must not lie inside an input)")
    p.add_argument("--report", type=Path, metavar="FILE", help=f"the JSON report (default: DIR/{REPORT_NAME})")
    p.add_argument("--internal-domain", action="append", default=[], metavar="DOMAIN",
                   help="an organization domain whose hosts, URLs and e-mail domains are internal (repeatable)")
    p.set_defaults(func=_run)


def _run(args) -> int:
    from umbra.scrub import ScrubConfig, Scrubber
    from umbra.scrub.tree import scrub_tree

    config = ScrubConfig(internal_domains=tuple(args.internal_domain))
    report_path = args.report if args.report is not None else args.out / REPORT_NAME
    report = scrub_tree(list(args.paths), args.out, Scrubber(config), report_path)
    print(report.summary())
    print(f"scrubbed copies: {args.out}")
    print(f"report: {report_path}")
    return 0
