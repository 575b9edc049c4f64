"""`umbra cloud serve | token add/list/revoke | cert`: the cloud service's command line."""

from __future__ import annotations

import argparse
import datetime as dt
from pathlib import Path


def register(sub) -> None:
    from server.serve import add_serve_args

    cloud = sub.add_parser("cloud", help="the cloud service that runs the middle blocks")
    csub = cloud.add_subparsers(dest="cloud_command", required=True)

    serve = csub.add_parser("serve", help="serve the middle blocks (FastAPI + uvicorn)",
                            description="Settings come from UMBRA_CLOUD_* variables; flags override them.")
    add_serve_args(serve)
    serve.set_defaults(func=_serve)

    token = csub.add_parser("token", help="manage client bearer tokens")
    tsub = token.add_subparsers(dest="token_command", required=True)
    for name, func, help_ in (("add", _token_add, "issue a token for client NAME (printed once)"),
                              ("revoke", _token_revoke, "revoke every token of client NAME"),
                              ("list", _token_list, "list clients and token ids (never the tokens)")):
        p = tsub.add_parser(name, help=help_)
        if name != "list":
            p.add_argument("name", metavar="NAME")
        p.add_argument("--token-file", type=Path, help="default: UMBRA_CLOUD_TOKEN_FILE or "
                                                       "~/.config/umbra/cloud-tokens.json")
        p.set_defaults(func=func)

    cert = csub.add_parser("cert", help="make a self-signed TLS key/certificate pair")
    cert.add_argument("--out-dir", type=Path, required=True, help="writes cert.pem and key.pem (0600) here")
    cert.add_argument("--host", action="append", dest="hosts",
                      help="DNS name or IP for the certificate (repeatable; default localhost, 127.0.0.1, ::1)")
    cert.add_argument("--days", type=int, default=365)
    cert.set_defaults(func=_cert)


def _serve(args: argparse.Namespace) -> int:
    from server.serve import run, settings_from_args

    return run(settings_from_args(args), args.ready_file, args.exit_with_parent)


def _store(args: argparse.Namespace):
    from server.auth import TokenStore
    from server.settings import CloudSettings

    return TokenStore(args.token_file or CloudSettings().token_file)


def _token_add(args: argparse.Namespace) -> int:
    print(_store(args).add(args.name))
    return 0


def _token_revoke(args: argparse.Namespace) -> int:
    n = _store(args).revoke(args.name)
    print(f"revoked {n} token(s) of {args.name}")
    return 0 if n else 1


def _token_list(args: argparse.Namespace) -> int:
    for name, token_id, created in _store(args).names():
        print(f"{name}\t{token_id}\t{dt.datetime.fromtimestamp(created, dt.timezone.utc):%Y-%m-%d %H:%M}Z")
    return 0


def _cert(args: argparse.Namespace) -> int:
    from server.tls import DEFAULT_HOSTS, make_self_signed

    cert, key = make_self_signed(args.out_dir, tuple(args.hosts or DEFAULT_HOSTS), args.days)
    print(f"certificate: {cert}\nprivate key: {key}")
    return 0
