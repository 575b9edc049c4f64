"""`umbra adapters list | show | add | remove | export-peft --bundle DIR`: the adapters of a client
bundle (umbra/privacy/bundle_adapters.py). Each change is one atomic commit of the bundle's
manifest; nothing here prints weights."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from umbra.privacy.manifest import ROLES  # torch-free


def register(subparsers) -> None:
    p = subparsers.add_parser("adapters", help="the adapters of a client bundle (experts, shared prompt, access)")
    sub = p.add_subparsers(dest="adapters_command", required=True)
    ls = sub.add_parser("list", help="name, kind, placement, role and language of each adapter")
    ls.add_argument("--json", action="store_true", help="the manifest's entries as JSON")
    ls.set_defaults(func=_list)
    show = sub.add_parser("show", help="one adapter's manifest entry (how it was trained, ε, file, hash)")
    show.add_argument("name")
    show.set_defaults(func=_show)
    add = sub.add_parser("add", help="add an adapter file (umbra-adapter safetensors) to the bundle")
    add.add_argument("file", type=Path)
    add.add_argument("--role", required=True, choices=ROLES,
                     help="shared: every request; expert: one language's requests; access: chosen by the access gate")
    add.add_argument("--language", help="an expert's language (aliases such as py or golang work)")
    add.add_argument("--name", help="store it under this name (default: the name in the file)")
    add.add_argument("--training", default="{}", help="JSON: how it was trained (method, data, steps, seed, ...)")
    add.add_argument("--replace", action="store_true", help="replace an adapter of the same name")
    add.set_defaults(func=_add)
    rm = sub.add_parser("remove", help="remove an adapter from the bundle")
    rm.add_argument("name")
    rm.set_defaults(func=_remove)
    peft = sub.add_parser("export-peft", help="write a LoRA adapter as a peft adapter directory")
    peft.add_argument("name")
    peft.add_argument("--out", required=True, type=Path, metavar="DIR")
    peft.set_defaults(func=_export)
    for q in (ls, show, add, rm, peft):
        q.add_argument("--bundle", required=True, type=Path, metavar="DIR", help="client bundle (from `umbra init`)")


def _manifest(args):
    from umbra.privacy.manifest import Manifest

    return Manifest.read(args.bundle)


def _entry(args):
    from umbra.errors import ConfigError

    entries = _manifest(args).adapter_entries()
    if args.name not in entries:
        raise ConfigError(f"bundle {args.bundle} has no adapter named {args.name!r} "
                          f"(it has: {', '.join(sorted(entries)) or 'none'})")
    return entries[args.name]


def _list(args) -> int:
    entries = _manifest(args).adapter_entries()
    if args.json:
        print(json.dumps({name: e.to_json() for name, e in entries.items()}, indent=2, sort_keys=True))
        return 0
    if not entries:
        print(f"{args.bundle}: no adapters")
        return 0
    print(f"{'name':16} {'kind':12} {'placement':10} {'role':7} {'language':10} {'parameters':>10}  ε")
    for name, e in sorted(entries.items()):
        eps = "—" if not e.privacy else f"{e.privacy.get('epsilon')}"
        print(f"{name:16} {e.kind:12} {e.placement:10} {e.role:7} {e.language or '—':10} {e.parameters:>10}  {eps}")
    return 0


def _show(args) -> int:
    entry = _entry(args)
    print(json.dumps({"name": entry.name, **entry.to_json()}, indent=2, sort_keys=True))
    return 0


def _add(args) -> int:
    from umbra.engine.routing import canonical_language
    from umbra.errors import ConfigError
    from umbra.model.adapters.files import read_adapter
    from umbra.privacy.bundle_adapters import add_adapter, bundle_shape

    try:
        training = json.loads(args.training)
    except ValueError as exc:
        raise ConfigError(f"--training must be a JSON object: {exc}") from exc
    if not isinstance(training, dict):
        raise ConfigError("--training must be a JSON object")
    spec, shape = bundle_shape(args.bundle, _manifest(args))
    adapter = read_adapter(args.file, spec, shape, name=args.name)
    entry = add_adapter(args.bundle, adapter, role=args.role, language=canonical_language(args.language),
                        training=training, replace=args.replace)
    print(f"added {entry.name}: {entry.kind} at {entry.placement}, {entry.role}"
          + (f" for {entry.language}" if entry.language else "") + f" ({entry.file})", file=sys.stderr)
    return 0


def _remove(args) -> int:
    from umbra.privacy.bundle_adapters import remove_adapter

    remove_adapter(args.bundle, args.name)
    print(f"removed {args.name}", file=sys.stderr)
    return 0


def _export(args) -> int:
    from umbra.model.adapters.files import export_peft, read_adapter
    from umbra.privacy.bundle_adapters import bundle_shape

    entry = _entry(args)
    manifest = _manifest(args)
    spec, shape = bundle_shape(args.bundle, manifest)
    adapter = read_adapter(args.bundle / entry.file, spec, shape, expected_sha256=entry.sha256, name=entry.name)
    out = export_peft(adapter, args.out, manifest.base.get("model_id"))
    print(f"wrote {out} (load with peft.PeftModel.from_pretrained on {manifest.base.get('model_id')})", file=sys.stderr)
    return 0
