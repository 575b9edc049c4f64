"""`umbra federation serve|join|simulate`: organizations train one shared SECURE adapter together on Flower
(umbra/federation; docs/securegate.md, "Federation"). Only the secure adapter's update leaves an
organization; its raw code, revealing adapter and keys never do.

    umbra federation serve --model DIR --min-nodes 3 --rounds 3 --out global.npz \\
        --ssl-certfile server.pem --ssl-keyfile server.key --ssl-ca-certfile ca.pem [--enable-supernode-auth]
    umbra federation join HOST:PORT --data src/ --model DIR --internal-domain acme.com \\
        --root-certificates ca.pem [--auth-private-key node.key --auth-public-key node.pub]

`serve` starts a Flower SuperLink, submits the ServerApp with `flwr run` and waits for the run;
`join` runs a SuperNode for this organization's code (foreground, until stopped); `--bundle DIR`
trains on the organization's client bundle (its private tokenizer; keys from the OS keyring).
`simulate` runs a whole federation on this machine with Flower's simulation engine (Ray), one
virtual SuperNode per organization (directories, or `--orgs orgs.json` with per-organization
settings: umbra/federation/organizations.py):

    umbra federation simulate acme/ globex/ initech/ --model DIR --rounds 3 --out global.npz
    umbra federation simulate --orgs orgs.json --model DIR --cpus 2 --record run/

Flower is the
`federation` extra, in .venv-federation (scripts/federation_env.sh): run umbra from there,
`.venv-federation/bin/python -m umbra.cli.main federation ...`. `--insecure` (no TLS) is for
loopback tests only."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from umbra.errors import ConfigError
from umbra.federation.deploy import RunSettings
from umbra.federation.organizations import OrgSettings
from umbra.processes import end_process


def register(sub) -> None:
    p = sub.add_parser("federation",
                       help="federated secure adapters on Flower (serve a federation, join one, simulate one here)")
    s = p.add_subparsers(dest="federation_command", required=True)

    v = s.add_parser("serve", help="start a SuperLink and run the federation's ServerApp on it")
    v.add_argument("--model", required=True, type=Path, metavar="DIR",
                   help="the public base model every organization uses (shapes the global adapter)")
    v.add_argument("--host", default="127.0.0.1", help="address the SuperLink listens on (default: %(default)s)")
    v.add_argument("--port", type=int, default=9092, help="SuperLink port (default: %(default)s)")
    v.add_argument("--min-nodes", type=int, default=RunSettings.min_nodes,
                   help="organizations a round waits for (default: %(default)s)")
    v.add_argument("--node-wait", type=float, default=RunSettings.node_wait,
                   help="seconds a round waits for them (default: %(default)s)")
    v.add_argument("--round-timeout", type=float, default=RunSettings.round_timeout,
                   help="seconds a round waits for replies; late or dead nodes are left out (default: %(default)s)")
    _run_args(v)
    v.add_argument("--workdir", type=Path, metavar="DIR", help="Flower's app and config files (default: a temp dir)")
    v.add_argument("--keep-running", action="store_true", help="leave the SuperLink up after the run")
    _tls_server(v)

    j = s.add_parser("join", help="run a SuperNode for this organization's code")
    j.add_argument("superlink", metavar="HOST:PORT", help="the federation's SuperLink")
    j.add_argument("--data", required=True, nargs="+", type=Path, metavar="PATH",
                   help="the organization's code: directories, files or .jsonl of {path, text}")
    j.add_argument("--model", required=True, type=Path, metavar="DIR",
                   help="the same public base model as the server's")
    j.add_argument("--port", type=int, default=9094,
                   help="the SuperNode's local ClientApp API port (default: %(default)s)")
    j.add_argument("--global-out", type=Path, metavar="FILE",
                   help="keep the final global secure adapter here (.npz) for `umbra securegate train --global`")
    _org_args(j)
    j.add_argument("--home", type=Path, metavar="DIR", help="Flower's state directory (default: ~/.flwr)")
    j.add_argument("--insecure", action="store_true", help="no TLS (loopback tests only)")
    j.add_argument("--root-certificates", type=Path, metavar="PEM", help="CA certificate that signed the SuperLink's")
    j.add_argument("--auth-private-key", type=Path, metavar="FILE",
                   help="this node's ECDSA private key (a SuperLink with --enable-supernode-auth)")
    j.add_argument("--auth-public-key", type=Path, metavar="FILE", help="its public key (registered at the SuperLink)")
    j.set_defaults(func=run_join)

    m = s.add_parser("simulate", help="run a whole federation here on Flower's simulation engine (Ray)")
    m.add_argument("orgs_dirs", nargs="*", type=Path, metavar="ORG_DIR",
                   help="one organization per directory (its code; named after the directory)")
    m.add_argument("--orgs", type=Path, metavar="FILE",
                   help="organizations from a JSON list of {name, data, internal_domains, bundle, service, dp_epsilon, "
                        "...} (paths relative to the file; the options below are the defaults)")
    m.add_argument("--model", required=True, type=Path, metavar="DIR",
                   help="the public base model of every organization")
    m.add_argument("--cpus", type=int, default=os.cpu_count() or 1, help="CPUs Ray may use (default: all, %(default)s)")
    m.add_argument("--cpus-per-org", type=float, default=1.0,
                   help="CPUs per organization's ClientApp; cpus / this run at once (default: %(default)s)")
    m.add_argument("--keep-dir", type=Path, metavar="DIR",
                   help="each organization keeps the final global adapter at DIR/<name>.npz (and its ε record under DP)")
    _run_args(m)
    _org_args(m)
    m.set_defaults(func=run_simulate)


def _run_args(p) -> None:
    """The run's settings (RunSettings), the same for `serve` and `simulate`."""
    p.add_argument("--rounds", type=int, default=RunSettings.rounds,
                   help="communication rounds T (default: %(default)s)")
    p.add_argument("--momentum", type=float, default=RunSettings.momentum,
                   help="server Nesterov momentum m (default: %(default)s)")
    p.add_argument("--server-lr", type=float, default=RunSettings.server_lr,
                   help="server rate η (default: %(default)s; at 1 the momentum cancels: plain FedAvg)")
    p.add_argument("--rank", type=int, default=RunSettings.rank, help="secure LoRA rank (default: %(default)s)")
    p.add_argument("--lr", type=float, default=RunSettings.lr, help="organizations' AdamW rate (default: %(default)s)")
    p.add_argument("--epochs", type=int, default=RunSettings.epochs,
                   help="local passes per round K (default: %(default)s)")
    p.add_argument("--block-len", type=int, default=RunSettings.block_len,
                   help="tokens per training block (default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=RunSettings.batch_size,
                   help="blocks per step (default: %(default)s)")
    p.add_argument("--fim-rate", type=float, default=RunSettings.fim_rate,
                   help="share of FIM examples (default: %(default)s)")
    p.add_argument("--seed", type=int, default=RunSettings.seed)
    p.add_argument("--out", type=Path, metavar="FILE", help="write the final global secure adapter (.npz)")
    p.add_argument("--record", type=Path, metavar="DIR",
                   help="describe every message the server receives, and keep each round's updates, here")


def _org_args(p) -> None:
    """An organization's own settings (OrgSettings), for `join` and the defaults of `simulate`."""
    p.add_argument("--internal-domain", action="append", default=[], metavar="DOMAIN",
                   help="the organization's own domain: its hosts and URLs are scrubbed (repeatable)")
    p.add_argument("--threads", type=int, default=OrgSettings.threads,
                   help="torch threads for training (0: torch's default)")
    p.add_argument("--bundle", type=Path, metavar="DIR",
                   help="train on this client bundle's private tokenizer and embedding table (its keys: the OS keyring)")
    p.add_argument("--service", default="", help="the keyring service of the bundle's keys (default: umbra)")
    p.add_argument("--dp-epsilon", type=float, default=OrgSettings.dp_epsilon, metavar="EPS",
                   help="train the organization's secure adapter by document-level DP-SGD at this ε for the whole "
                        "federation (default: %(default)s; 0: no DP). Without DP, what the scrubber cannot recognise "
                        "(codenames, account numbers) reaches every member through the global adapter: "
                        "docs/securegate.md measures it, and ε = 8 removing it")
    p.add_argument("--dp-delta", type=float, default=OrgSettings.dp_delta,
                   help="DP δ, below 1 / files (default: %(default)s)")
    p.add_argument("--dp-clip", type=float, default=OrgSettings.dp_clip,
                   help="DP clip bound C per file (default: %(default)s)")
    p.add_argument("--dp-batch", type=int, default=OrgSettings.dp_batch,
                   help="DP expected files per step B (default: %(default)s)")


def _org_settings(args, data=(), global_out: Path | None = None) -> OrgSettings:
    return OrgSettings(data=tuple(str(p) for p in data), internal_domains=tuple(args.internal_domain),
                       threads=args.threads, global_out=str(global_out) if global_out else "",
                       bundle=str(args.bundle) if args.bundle else "", service=args.service,
                       dp_epsilon=args.dp_epsilon, dp_delta=args.dp_delta, dp_clip=args.dp_clip,
                       dp_batch=args.dp_batch)


def _run_settings(args, min_nodes: int, **timing) -> RunSettings:
    if not args.model.is_dir():
        raise ConfigError(f"{args.model} is not a model directory")
    return RunSettings(
        model=str(args.model.resolve()), rounds=args.rounds, min_nodes=min_nodes, momentum=args.momentum,
        server_lr=args.server_lr, rank=args.rank, lr=args.lr, epochs=args.epochs, block_len=args.block_len,
        batch_size=args.batch_size, fim_rate=args.fim_rate, seed=args.seed,
        record_dir=str(args.record.resolve()) if args.record else "", out=str(args.out.resolve()) if args.out else "",
        **timing).validate()


def _tls_server(p) -> None:
    g = p.add_argument_group("TLS and node authentication (Flower's)")
    g.add_argument("--insecure", action="store_true", help="no TLS (loopback tests only)")
    g.add_argument("--ssl-certfile", type=Path, metavar="PEM", help="the SuperLink's certificate")
    g.add_argument("--ssl-keyfile", type=Path, metavar="PEM", help="its private key")
    g.add_argument("--ssl-ca-certfile", type=Path, metavar="PEM", help="the CA certificate that signed it")
    g.add_argument("--enable-supernode-auth", action="store_true",
                   help="admit only SuperNodes whose public key is registered (`flwr supernode register`)")
    p.set_defaults(func=run_serve)


def _stop(proc: subprocess.Popen) -> None:
    """End a Flower process this command started (it shares our process group, so a Ctrl-C or a
    signal to the group reaches it too; Flower's own helpers exit when their parent does)."""
    end_process(proc, grace=15)


def run_serve(args) -> int:
    from umbra.federation.deploy import flower_env, run_cmd, superlink_cmd, wait_port, write_app, write_flower_home

    settings = _run_settings(args, args.min_nodes, node_wait=args.node_wait, round_timeout=args.round_timeout)
    link = superlink_cmd(args.port, host=args.host, insecure=args.insecure, certfile=args.ssl_certfile,
                         keyfile=args.ssl_keyfile, ca_certfile=args.ssl_ca_certfile,
                         supernode_auth=args.enable_supernode_auth)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="umbra-federation-"))
    local = "127.0.0.1" if args.host in ("0.0.0.0", "::") else args.host
    home = write_flower_home(workdir / "home", f"{local}:{args.port}", insecure=args.insecure,
                             root_certificates=None if args.insecure else args.ssl_ca_certfile)
    app = write_app(workdir / "app", settings)
    superlink = subprocess.Popen(link, env=flower_env(home))
    try:
        wait_port(local, args.port, 60, alive=lambda: superlink.poll() is None)
        print(f"umbra federation: SuperLink on {args.host}:{args.port}; waiting for {args.min_nodes} organizations "
              f"(`umbra federation join HOST:{args.port} ...`)", file=sys.stderr)
        code = subprocess.run(run_cmd(app), env=flower_env(home)).returncode
        if args.out and code == 0:
            print(f"umbra federation: global secure adapter written to {args.out}", file=sys.stderr)
        if args.keep_running:
            print("umbra federation: the SuperLink stays up (Ctrl-C to stop it)", file=sys.stderr)
            superlink.wait()
        return code
    finally:
        _stop(superlink)


NO_DP_NOTICE = ("umbra federation: no DP (--dp-epsilon 0): the scrubber removes the secrets it recognises, but "
                "identifiers it cannot (codenames, account numbers) are learnt by the global adapter every member "
                "receives; --dp-epsilon 8 removed them in docs/securegate.md's measurements")


def _check_dp(orgs: dict[str, OrgSettings]) -> None:
    """Each organization's DP setting against its count of files, before any process starts."""
    from umbra.tuning.securegate import read_org_code

    for name, org in orgs.items():
        if org.dp_epsilon:
            org.check_dp(len(read_org_code([Path(p) for p in org.data])), name)


def run_join(args) -> int:
    from umbra.federation.deploy import flower_env, superlink_address, supernode_cmd

    settings = _org_settings(args, args.data, args.global_out)
    config = settings.node_config(args.model)
    cmd = supernode_cmd(superlink_address(args.superlink), args.port, config, insecure=args.insecure,
                        root_certificates=args.root_certificates, auth_private_key=args.auth_private_key,
                        auth_public_key=args.auth_public_key)
    _check_dp({"this organization": settings})
    if not settings.dp_epsilon:
        print(NO_DP_NOTICE, file=sys.stderr)
    proc = subprocess.Popen(cmd, env=flower_env(args.home))
    try:
        return proc.wait()
    except KeyboardInterrupt:
        return 130
    finally:
        _stop(proc)


def run_simulate(args) -> int:
    from dataclasses import replace

    from umbra.federation.organizations import read_organizations

    # torch's default threads in every actor would oversubscribe the CPUs: one actor, its share
    defaults = replace(_org_settings(args), threads=args.threads or max(1, int(args.cpus_per_org)))
    orgs = read_organizations(args.orgs, defaults) if args.orgs else {}
    for d in args.orgs_dirs:
        if d.name in orgs:
            raise ConfigError(f"two organizations are named {d.name!r} (name the directories apart, or use --orgs)")
        orgs[d.name] = replace(defaults, data=(str(d),))
    if not orgs:
        raise ConfigError("name the organizations: their directories, or --orgs FILE")
    if args.keep_dir:
        args.keep_dir.mkdir(parents=True, exist_ok=True)
        orgs = {n: o if o.global_out else replace(o, global_out=str(args.keep_dir / f"{n}.npz")) for n, o in orgs.items()}
    configs = [o.node_config(args.model) for o in orgs.values()]  # every path checked before Ray starts
    settings = _run_settings(args, len(orgs))
    try:
        from umbra.federation.simulation import simulate
    except ImportError as exc:
        raise ConfigError(f"the simulation needs the `federation` extra with Ray ({exc}); scripts/federation_env.sh "
                          "installs it into .venv-federation: run umbra from there") from None
    _check_dp(orgs)
    print(f"umbra federation: simulating {len(orgs)} organizations ({', '.join(orgs)}) for {settings.rounds} rounds "
          f"on {args.cpus} CPUs", file=sys.stderr)
    if not all(o.dp_epsilon for o in orgs.values()):
        print(NO_DP_NOTICE.replace("no DP (--dp-epsilon 0)", "an organization without DP"), file=sys.stderr)
    simulate(settings, configs, cpus=args.cpus, cpus_per_org=args.cpus_per_org)
    if args.out:
        print(f"umbra federation: global secure adapter written to {args.out}", file=sys.stderr)
    return 0
