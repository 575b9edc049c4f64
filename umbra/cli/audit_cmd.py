"""`umbra audit` — the client security report: what a curious cloud could reconstruct from the
traffic this client actually sent.

    umbra audit on | off       record completions from now on (encrypted; off by default)
    umbra audit status         the setting, the recordings and where they are
    umbra audit [report]       attack the recordings, write an HTML report (--out)
    umbra audit clear          delete the recordings and their key

UMBRA_AUDIT=1 / 0 overrides the saved setting for one process. See docs/privacy/audit.md."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from umbra.errors import ConfigError

ACTIONS = ("report", "on", "off", "status", "clear")


def register(sub) -> None:
    from umbra.audit.config import AuditConfig
    from umbra.attacks.probe_config import ProbeConfig

    d, dp = AuditConfig(), ProbeConfig()
    p = sub.add_parser("audit", help="client security report on recorded traffic",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", nargs="?", choices=ACTIONS, default="report")
    p.add_argument("--out", type=Path, default=Path("umbra-audit.html"), help="report file (mode 0600)")
    p.add_argument("--model", type=Path, default=None, help="the base model the cloud holds (default: as recorded)")
    p.add_argument("--corpus", type=Path, default=d.corpus_dir, help="public code for the attacker (corpus layout)")
    p.add_argument("--last", type=int, default=None, help="only the most recent N recordings")
    p.add_argument("--public-blocks", type=int, default=d.public_blocks)
    p.add_argument("--probe-epochs", type=int, default=dp.epochs)
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    p.add_argument("--dir", type=Path, default=None, help="audit directory (default: UMBRA_AUDIT_DIR or XDG data)")
    p.set_defaults(func=run)


def run(args) -> int:
    from umbra.audit.settings import audit_enabled, set_enabled
    from umbra.audit.store import AuditStore

    store = AuditStore(args.dir)
    if args.action in ("on", "off"):
        path = set_enabled(args.action == "on")
        print(f"auditing {args.action} (saved in {path})")
        if args.action == "on":
            store.prepare()  # the keyring key now, not in the middle of a completion
        return 0
    if args.action == "status":
        print(f"auditing: {'on' if audit_enabled() else 'off'}; {len(store.paths())} recording(s) in {store.dir}")
        return 0
    if args.action == "clear":
        print(f"removed {store.clear()} recording(s) and their key")
        return 0
    return _report(args, store)


def _report(args, store) -> int:
    import dataclasses

    import torch

    from umbra.audit.analysis import run_audit
    from umbra.audit.config import AuditConfig
    from umbra.audit.report import write_report
    from umbra.attacks.probe_config import ProbeConfig

    if args.last is not None and args.last < 1:
        raise ConfigError("--last must be >= 1")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    config = AuditConfig(corpus_dir=args.corpus, public_blocks=args.public_blocks, model_dir=args.model,
                         last=args.last, probe=dataclasses.replace(ProbeConfig(), epochs=args.probe_epochs))
    groups = run_audit(store, config)
    command = "umbra " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:] else "umbra audit"
    out = write_report(args.out, groups, command)
    print(f"wrote {out}")
    return 0
