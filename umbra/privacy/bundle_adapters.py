"""The adapters of a client bundle: added, removed and loaded through the manifest's adapters
section (manifest.py, `AdapterEntry`), each a separate content-addressed file under adapters/,
every change one atomic manifest commit (bundle_commit.py).

    entry = add_adapter(bundle_dir, adapter, role="expert", language="python", training={...})
    remove_adapter(bundle_dir, "python")
    adapters = load_adapters(bundle_dir, manifest, spec, shape)     # name -> Adapter, hashes checked

Placement is checked when an adapter is added: a soft prompt must be shared by every request
(role "shared"), because its states cross the wire; an expert or access adapter placed on the
encoder is allowed but changes what the cloud sees (docs/benchmarks.md, "What adapters leak")."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import torch

from umbra.errors import ConfigError
from umbra.model.adapters.config import Kind, Placement, SplitShape, config_to_dict
from umbra.model.adapters.files import adapter_bytes, read_adapter
from umbra.model.adapters.modules import Adapter
from umbra.model.spec import ModelSpec, load_spec
from umbra.privacy.bundle_commit import bundle_change, now
from umbra.privacy.manifest import BASE_DIR, ROLES, AdapterEntry, Manifest

log = logging.getLogger(__name__)


def bundle_shape(bundle_dir: Path, manifest: Manifest) -> tuple[ModelSpec, SplitShape]:
    spec = load_spec(Path(bundle_dir) / BASE_DIR)
    split = manifest.split
    return spec, SplitShape(spec.num_layers, split["encoder_blocks"], split["decoder_blocks"])


def check_role(adapter: Adapter, role: str, language: str | None) -> None:
    if role not in ROLES:
        raise ConfigError(f"adapter role must be one of {', '.join(ROLES)}, got {role!r}")
    if (role == "expert") != (language is not None):
        raise ConfigError("an expert names its language, and only an expert does")
    if adapter.kind is Kind.SOFT_PROMPT and role != "shared":
        raise ConfigError(f"soft prompt {adapter.name} would send different states per {role}: a soft prompt "
                          f"crosses the wire, so only a shared one (the same for every request) may be one")
    if adapter.config.placement is Placement.MIDDLE:
        raise ConfigError(f"adapter {adapter.name} sits on the cloud's blocks; a bundle holds client adapters only")
    if adapter.config.placement in (Placement.ENCODER, Placement.CLIENT) and role != "shared":
        log.warning("adapter %s (%s) sits on the encoder: what the cloud receives now depends on when it is "
                    "active (see docs/benchmarks.md, 'What adapters leak')", adapter.name, role)


def add_adapter(bundle_dir: str | Path, adapter: Adapter, *, role: str, language: str | None = None,
                training: dict | None = None, privacy: dict | None = None, replace: bool = False) -> AdapterEntry:
    """Store `adapter` in the bundle under its name and commit the manifest."""
    d = Path(bundle_dir)
    check_role(adapter, role, language)
    if role == "revealing":
        raise ConfigError(f"revealing adapter {adapter.name} would be stored in plaintext: a revealing adapter is "
                          f"added sealed under an access key (`umbra keys access create --adapter-file`)")
    with bundle_change(d) as change:
        if adapter.name in change.manifest.adapters and not replace:
            raise ConfigError(f"bundle {d} already has an adapter named {adapter.name!r} (replace it explicitly)")
        old = change.manifest.adapters.get(adapter.name)
        if old is not None and old.get("role") == "revealing":
            raise ConfigError(f"{adapter.name!r} is a revealing adapter: it changes only through `umbra keys access`")
        if role == "secure":
            other = [n for n, e in change.manifest.adapters.items() if e.get("role") == "secure" and n != adapter.name]
            if other:
                raise ConfigError(f"bundle {d} already has a secure adapter ({other[0]}); a bundle has one")
        spec, shape = bundle_shape(d, change.manifest)
        data = adapter_bytes(adapter, spec, shape)
        rel = change.store("adapters", adapter.name, data)
        entry = AdapterEntry(
            name=adapter.name, kind=adapter.kind.value, placement=adapter.config.placement.value, role=role,
            file=rel, sha256=hashlib.sha256(data).hexdigest(), config=config_to_dict(adapter.config),
            parameters=adapter.parameter_count, created=now(), language=language, training=dict(training or {}),
            privacy=privacy,
        )
        change.manifest.adapters[adapter.name] = entry.to_json()
    return entry


def remove_adapter(bundle_dir: str | Path, name: str) -> None:
    d = Path(bundle_dir)
    with bundle_change(d) as change:
        if name not in change.manifest.adapters:
            raise ConfigError(f"bundle {d} has no adapter named {name!r} "
                              f"(it has: {', '.join(sorted(change.manifest.adapters)) or 'none'})")
        if change.manifest.adapters[name].get("role") == "revealing":
            raise ConfigError(f"{name!r} is a revealing adapter: revoke its access keys with "
                              f"`umbra keys access revoke --drop-adapter`")
        del change.manifest.adapters[name]


def load_adapters(bundle_dir: str | Path, manifest: Manifest, spec: ModelSpec, shape: SplitShape,
                  dtype: torch.dtype | None = None) -> dict[str, Adapter]:
    """Every plaintext adapter the manifest lists, each checked against its hash and config
    (ConfigError naming the file otherwise). Revealing adapters are sealed: they are opened only
    in memory, with an access key (umbra/securegate/)."""
    d, out = Path(bundle_dir), {}
    for name, entry in manifest.adapter_entries().items():
        if entry.sealed:
            continue
        adapter = read_adapter(d / entry.file, spec, shape, expected_sha256=entry.sha256, name=name, dtype=dtype)
        if adapter.kind.value != entry.kind or adapter.config.placement.value != entry.placement:
            raise ConfigError(f"adapter file {d / entry.file} is a {adapter.kind.value} adapter at "
                              f"{adapter.config.placement.value}; the manifest says {entry.kind} at {entry.placement}")
        out[name] = adapter.eval()
    return out
