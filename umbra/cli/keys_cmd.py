"""`umbra keys list | rotate --bundle DIR | cloud-token set|delete URL | access ...` (list and cloud
tokens: logic in keys/cli.py; rotate here, since it re-encrypts a bundle of the privacy layer above
`keys`; SecureGate's access keys in access_cmd.py)."""

from __future__ import annotations

import sys
from pathlib import Path

from keys.store import DEFAULT_SERVICE
from umbra.cli import access_cmd


def register(subparsers) -> None:
    p = subparsers.add_parser("keys", help="list or rotate Umbra's keys, store cloud tokens (OS keyring)")
    sub = p.add_subparsers(dest="keys_command", required=True)
    ls = sub.add_parser("list", help="names of Umbra's entries in the OS keyring (never their values)")
    ls.add_argument("--service", default=DEFAULT_SERVICE, help="keyring service name (default: %(default)s)")
    ls.set_defaults(func=_list)
    rot = sub.add_parser("rotate", help="new key for a client bundle; its permutation re-encrypted atomically")
    rot.add_argument("--bundle", required=True, metavar="DIR", help="client bundle directory (from `umbra init`)")
    rot.add_argument("--service", default=DEFAULT_SERVICE, help="keyring service name (default: %(default)s)")
    rot.set_defaults(func=_rotate)
    tok = sub.add_parser("cloud-token", help="a cloud's bearer token in the OS keyring (for `umbra lsp` / `umbra serve`)")
    tok_sub = tok.add_subparsers(dest="token_command", required=True)
    put = tok_sub.add_parser("set", help="store the token for URL, read from stdin (never from the command line)")
    rm = tok_sub.add_parser("delete", help="delete the token stored for URL")
    for q, func in ((put, _token_set), (rm, _token_delete)):
        q.add_argument("url", metavar="URL", help="cloud service URL, e.g. https://cloud.example:8443")
        q.add_argument("--service", default=DEFAULT_SERVICE, help="keyring service name (default: %(default)s)")
        q.set_defaults(func=func)
    access_cmd.register(sub)


def _list(args) -> int:
    from keys.cli import list_keys

    return list_keys(args.service)


def _rotate(args) -> int:
    return rotate_bundle(args.bundle, args.service)


def rotate_bundle(bundle_dir: str | Path, service: str = DEFAULT_SERVICE, out=None) -> int:
    """New key for the bundle's permutation, re-encrypted atomically; prints the key ids only."""
    from keys.store import KeyStore
    from umbra.privacy.bundle import rotate_bundle_key

    out = out or sys.stdout
    old, new = rotate_bundle_key(bundle_dir, KeyStore(service))
    print(f"rotated the permutation key of {bundle_dir}: key {old} -> {new} (old key deleted)", file=out)
    return 0


def _token_set(args) -> int:
    from keys.cli import read_token, set_cloud_token

    return set_cloud_token(args.url, read_token(), args.service)


def _token_delete(args) -> int:
    from keys.cli import delete_cloud_token

    return delete_cloud_token(args.url, args.service)
