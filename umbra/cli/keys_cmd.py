"""`umbra keys list | rotate --bundle DIR` (logic in keys/cli.py)."""

from __future__ import annotations

from keys.store import DEFAULT_SERVICE


def register(subparsers) -> None:
    p = subparsers.add_parser("keys", help="list or rotate Umbra's keys in the OS keyring")
    sub = p.add_subparsers(dest="keys_command", required=True)
    ls = sub.add_parser("list", help="names of Umbra's entries in the OS keyring (never their values)")
    ls.add_argument("--service", default=DEFAULT_SERVICE, help="keyring service name (default: %(default)s)")
    ls.set_defaults(func=_list)
    rot = sub.add_parser("rotate", help="new key for a client bundle; its permutation re-encrypted atomically")
    rot.add_argument("--bundle", required=True, metavar="DIR", help="client bundle directory (from `umbra init`)")
    rot.add_argument("--service", default=DEFAULT_SERVICE, help="keyring service name (default: %(default)s)")
    rot.set_defaults(func=_rotate)


def _list(args) -> int:
    from keys.cli import list_keys

    return list_keys(args.service)


def _rotate(args) -> int:
    from keys.cli import rotate_bundle

    return rotate_bundle(args.bundle, args.service)
