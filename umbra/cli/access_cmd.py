"""`umbra keys access create|list|status|export|import|rotate|revoke`: SecureGate's access keys
(umbra/securegate/bundle_access.py does the work; this module only parses and prints).

A new or rotated key is printed once, on stdout, for distribution (progress and advice go to
stderr, so `... | tool` captures the key alone); `export` prints it again from this keyring;
`import` reads it from stdin or a hidden prompt, never from the command line. Nothing else ever
prints a key: `list` and `status` name keys, adapters and key ids only."""

from __future__ import annotations

import sys

from keys.store import DEFAULT_SERVICE

STEP_TEXT = {
    "open": "opened the adapter in memory", "key": "stored the new key in the OS keyring",
    "seal": "sealed the adapter under it", "gate": "retrained the access gate", "commit": "committed the bundle",
    "clean": "removed keys the bundle no longer names from this keyring",
}


def register(sub) -> None:
    p = sub.add_parser("access", help="SecureGate access keys: who can unlock a bundle's revealing adapters")
    acc = p.add_subparsers(dest="access_command", required=True)

    def cmd(name, help_, func, key_name=True):
        q = acc.add_parser(name, help=help_)
        if key_name:
            q.add_argument("name", metavar="NAME", help="the access key's name (e.g. a team)")
        q.add_argument("--bundle", required=True, metavar="DIR", help="client bundle directory (from `umbra init`)")
        q.add_argument("--service", default=DEFAULT_SERVICE, help="keyring service name (default: %(default)s)")
        q.set_defaults(func=func)
        return q

    c = cmd("create", "a new key for a revealing adapter (printed once); or seal a new adapter from a file", _create)
    c.add_argument("--adapter", required=True, metavar="ADAPTER", help="the revealing adapter the key opens")
    c.add_argument("--adapter-file", metavar="FILE",
                   help="a trained adapter file (umbra adapters format) to add as the revealing adapter ADAPTER, "
                        "sealed under the new key; delete your plaintext copy afterwards")
    gate_config_option(c)
    cmd("list", "the bundle's access keys: name, adapter, key id, whether this keyring holds it", _list, False)
    cmd("status", "which revealing adapters this user's keys unlock (never a key)", _status, False)
    cmd("export", "print a key this keyring holds, for distribution (a secret: use a secure channel)", _export)
    cmd("import", "store a distributed key in this keyring, read from stdin or a hidden prompt", _import, False)
    gate_config_option(cmd("rotate", "replace a key: new key printed once, gate retrained, adapter re-sealed; the old "
                               "key opens nothing", _rotate))
    r = cmd("revoke", "remove a key: its sealed copy deleted, gate retrained", _revoke)
    r.add_argument("--drop-adapter", action="store_true",
                   help="allow revoking the last key of an adapter, which drops the adapter (nothing could open it)")
    gate_config_option(r)


def gate_config_option(parser) -> None:
    """--gate-config on the commands that retrain the access gate."""
    parser.add_argument("--gate-config", metavar="FILE",
                        help="a JSON object of access-gate training settings (GateConfig's fields in "
                             "umbra/securegate/gate.py: steps, random_keys, check_per_class, ...) replacing the "
                             "defaults for this retraining; smaller values train faster and check fewer requests "
                             "(the gate still routes every check right, or the command fails and changes nothing)")


def _gate_config(args):
    """The GateConfig of --gate-config FILE, or None (the defaults)."""
    if not args.gate_config:
        return None
    import json
    from pathlib import Path

    from umbra.errors import ConfigError
    from umbra.securegate.gate import GateConfig

    try:
        data = json.loads(Path(args.gate_config).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the gate config {args.gate_config}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"the gate config {args.gate_config} must be a JSON object of GateConfig fields")
    return GateConfig.from_dict(data)


def _store(args):
    from keys.store import KeyStore

    return KeyStore(args.service)


def _progress(step: str) -> None:
    print(f"  {STEP_TEXT.get(step, step)}", file=sys.stderr)


def _show_once(key, what: str) -> None:
    print(f"{what}. The key follows, shown once: give it to its holders over a secure channel; they run "
          f"`umbra keys access import --bundle DIR` and paste it.", file=sys.stderr)
    print(key.text())
    sys.stdout.flush()


def _create(args) -> int:
    from umbra.securegate.bundle_access import add_revealing_adapter, create_key

    store, gate_config = _store(args), _gate_config(args)
    if args.adapter_file:
        adapter = _read_adapter_file(args.bundle, args.adapter_file, args.adapter)
        key = add_revealing_adapter(args.bundle, adapter, args.name, store, progress=_progress,
                                    training={"source": "file"}, gate_config=gate_config)
        what = f"sealed {args.adapter_file} as revealing adapter {args.adapter!r} under new key {args.name!r}"
    else:
        key = create_key(args.bundle, args.name, args.adapter, store, progress=_progress, gate_config=gate_config)
        what = f"created key {args.name!r} for revealing adapter {args.adapter!r}"
    _show_once(key, what)
    return 0


def _read_adapter_file(bundle_dir, path, name):
    from pathlib import Path

    from umbra.model.adapters.files import read_adapter
    from umbra.privacy.bundle_adapters import bundle_shape
    from umbra.privacy.manifest import Manifest

    spec, shape = bundle_shape(Path(bundle_dir), Manifest.read(Path(bundle_dir)))
    return read_adapter(path, spec, shape, name=name)


def _list(args) -> int:
    from umbra.securegate.bundle_access import key_statuses

    rows = key_statuses(args.bundle, _store(args))
    if not rows:
        print(f"{args.bundle} has no access keys (create one with `umbra keys access create`)")
        return 0
    print(f"{'key':<20} {'adapter':<20} {'key id':<16}  {'held here':<9}  created / rotated")
    for r in rows:
        when = r.created + (f" / {r.rotated}" if r.rotated else "")
        print(f"{r.name:<20} {r.adapter:<20} {r.key_id:<16}  {'yes' if r.held else 'no':<9}  {when}")
    return 0


def _status(args) -> int:
    from umbra.securegate.status import access_status

    report = access_status(args.bundle, _store(args))
    for line in report.lines():
        print(line)
    return 0


def _export(args) -> int:
    from umbra.securegate.bundle_access import export_key

    key = export_key(args.bundle, args.name, _store(args))
    print(f"key {args.name!r} follows: a secret, pass it on over a secure channel", file=sys.stderr)
    print(key.text())
    return 0


def _import(args) -> int:
    from keys.access_keys import read_secret_text
    from umbra.securegate.bundle_access import import_key

    entry = import_key(args.bundle, read_secret_text("access key"), _store(args))
    print(f"stored key {entry.name!r} in the OS keyring: it unlocks revealing adapter {entry.adapter!r}")
    return 0


def _rotate(args) -> int:
    from umbra.securegate.bundle_access import rotate_key

    key = rotate_key(args.bundle, args.name, _store(args), progress=_progress, gate_config=_gate_config(args))
    _show_once(key, f"rotated key {args.name!r}: the old key opens nothing in this bundle (copies of old sealed "
                    f"files stay readable with it)")
    return 0


def _revoke(args) -> int:
    from umbra.securegate.bundle_access import revoke_key

    dropped = revoke_key(args.bundle, args.name, _store(args), drop_adapter=args.drop_adapter, progress=_progress,
                         gate_config=_gate_config(args))
    print(f"revoked key {args.name!r}" + (f"; revealing adapter {dropped!r} dropped" if dropped else ""))
    return 0
