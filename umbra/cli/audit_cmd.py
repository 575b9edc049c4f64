"""`umbra audit` — the client security report: what a curious cloud could reconstruct from the
traffic this client actually sent.

    umbra audit on | off       record completions from now on (encrypted; off by default)
    umbra audit status         the setting, the recordings and where they are
    umbra audit [report]       attack the recordings, write an HTML report (--out)
    umbra audit clear          delete the recordings and their key

The report includes the adaptive attacks: a shadow client of your configuration (its own table
and π, tuned like yours), bigram decipherment of the received states, and with --bundle the
oracle probe trained on your own client's states of public files.

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
    p.add_argument("--bundle", type=Path, default=None, metavar="DIR",
                   help="your client bundle: its manifest's configuration for the shadow client, and the oracle "
                        "probe (trained on your own client's states of public files)")
    p.add_argument("--service", default=None, help="keyring service holding the bundle's key (default: umbra)")
    p.add_argument("--no-adaptive", dest="adaptive", action="store_false",
                   help="skip the adaptive attacks (shadow client, oracle); decipherment still runs")
    p.add_argument("--shadow-steps", type=int, default=None,
                   help="STuning steps of the shadow client (default and minimum: your bundle's)")
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


def _bundle(args):
    if args.bundle is None:
        return None
    import torch

    from keys import DEFAULT_SERVICE, KeyStore
    from umbra.privacy.bundle import load_bundle

    return load_bundle(args.bundle, store=KeyStore(args.service or DEFAULT_SERVICE), dtype=torch.float32)


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
    adaptive = None
    if args.adaptive:
        from umbra.attack_grid.shadow import ShadowConfig
        from umbra.attack_grid.shadow_audit import AdaptiveAudit, audit_adaptive

        if args.shadow_steps is not None and args.shadow_steps < 1:
            raise ConfigError("--shadow-steps must be >= 1")
        settings = AdaptiveAudit(args.corpus, (args.dir or store.dir) / "cache", public_blocks=args.public_blocks,
                                 shadow=ShadowConfig(steps=args.shadow_steps, probe=config.probe))
        adaptive = audit_adaptive(settings, _bundle(args))
    groups = run_audit(store, config, adaptive=adaptive)
    command = "umbra " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:] else "umbra audit"
    out = write_report(args.out, groups, command)
    print(f"wrote {out}")
    return 0
