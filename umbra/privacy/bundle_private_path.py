"""A bundle's private local path (umbra/model/private_path.py): its settings and weights in the
bundle, its secret derived from the bundle's key material.

    manifest.privacy["private_path"] = {"config": {...PrivatePathConfig}, "file": "private_path/
                                        private_path.<sha256[:12]>.safetensors", "sha256": "..."}
    file: "local.weight" (W, d×d) and, with a bottleneck, "basis" (Q, d×r); float32
          clean residual: "gate" ([d] or [1]) instead of W, and "clean_embed" ([V, d], the base
          model's public embedding table, PUBLIC row order, the base checkpoint's dtype)

Written like the client weights: a content-addressed file, then one atomic manifest commit
(bundle_commit.py), which also sweeps files no manifest names. The only vocab-indexed tensor, the
clean table, is stored in public row order and permuted in memory at load time, like the INDVocab
table: stored in private order, a public table next to the public model would give π away row by
row.

Why the clean table is stored in the bundle rather than read from the base model directory at
load time: the completion path with a remote cloud never needs the base model (only `--local`
and a self-started cloud read its middle blocks), a bundle must load the same way wherever it is
copied, and a content-addressed, hash-checked copy cannot drift from what the path was tuned with.
It costs one more V×d table (as large as indvocab.safetensors). It is public information — the
base model's own rows — so storing it reveals nothing; it is read once, from the base model
directory the bundle was made from (checked by its weight hashes), when `umbra tune
--clean-residual` attaches the path.

The secret. The noise key and the basis are derived, with domain-separation labels
(umbra/model/private_path.py), from

    secret = HKDF-SHA256(ikm = π's bytes, salt = bundle_id, info = "umbra/bundle/private-path/v1")

rather than from a new keyring entry or the permutation's keyring secret: π is the bundle's
long-lived secret (a uniform permutation of |V| ids: log2(|V|!) bits, 94 000 for |V| = 8 192),
available wherever the bundle is loaded, never written in plaintext (it is sealed under the
keyring secret), and — unlike the keyring secret — unchanged by `umbra keys rotate`. That matters:
a key rotation that changed the noise would hand the cloud a second, independent draw of every
prefix the client sends again, which is exactly the averaging the keyed noise exists to prevent.
A new bundle (`umbra init`) draws a new π and so a new secret."""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from umbra.errors import ConfigError
from umbra.model.private_path import PrivatePath
from umbra.model.private_path_config import PrivatePathConfig
from umbra.model.spec import ModelSpec
from umbra.privacy.aead import derive_key
from umbra.privacy.bundle_commit import bundle_change
from umbra.privacy.ltokenizer import Permutation, private_rows, public_rows
from umbra.privacy.manifest import Manifest, sha256_file

PRIVATE_PATH = "private_path"  # manifest privacy key, and the bundle subdirectory of its files
_INFO = b"umbra/bundle/private-path/v1"


def bundle_secret(permutation: Permutation, bundle_id: str) -> bytes:
    """The private path's secret of the bundle with this π and id (see the module doc)."""
    return derive_key(permutation.to_bytes(), bundle_id.encode(), _INFO)


def entry(manifest: Manifest) -> dict | None:
    """The manifest's private path entry, or None."""
    found = manifest.privacy.get(PRIVATE_PATH)
    if found is not None and (not isinstance(found, dict) or not {"config", "file", "sha256"} <= set(found)):
        raise ConfigError(f"the bundle's {PRIVATE_PATH} entry is malformed")
    return found


def path_file(manifest: Manifest) -> str | None:
    """The bundle-relative file the manifest's private path names (for the sweep)."""
    found = manifest.privacy.get(PRIVATE_PATH)
    return found.get("file") if isinstance(found, dict) else None


def _tensors(path: PrivatePath, permutation: Permutation, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    if path.config.clean:
        out = {"gate": path.gate.detach().float().cpu().contiguous(),
               "clean_embed": public_rows(path.clean_embed.detach(), permutation).to("cpu", dtype).contiguous()}
    else:
        out = {"local.weight": path.local.weight.detach().float().cpu().contiguous()}
    if path.basis is not None:
        out["basis"] = path.basis.detach().float().cpu().contiguous()
    return out


def save_private_path(bundle, path: PrivatePath | None = None) -> Manifest:
    """Write `path` (default: `bundle.private_path`) into the bundle and commit the manifest."""
    path = path if path is not None else getattr(bundle, "private_path", None)
    if path is None:
        raise ConfigError("there is no private path to save")
    dtype = getattr(torch, bundle.spec.torch_dtype, None)
    dtype = dtype if isinstance(dtype, torch.dtype) and dtype.is_floating_point else torch.float32
    data = st_save(_tensors(path, bundle.permutation, dtype), metadata={"format": "umbra-private-path/v1"})
    with bundle_change(bundle.dir) as change:
        rel = change.store(PRIVATE_PATH, PRIVATE_PATH, data)
        change.manifest.privacy[PRIVATE_PATH] = {"config": path.config.to_dict(), "file": rel,
                                                 "sha256": hashlib.sha256(data).hexdigest()}
    bundle.manifest = Manifest.read(bundle.dir)
    return bundle.manifest


def load_private_path(bundle_dir: str | Path, manifest: Manifest, spec: ModelSpec,
                      permutation: Permutation, dtype: torch.dtype | None = None) -> PrivatePath | None:
    """The bundle's private path (weights checked against the manifest's hash), or None. `dtype`:
    the clean table's, as the encoder is loaded (None: as stored)."""
    found = entry(manifest)
    if found is None:
        return None
    config = PrivatePathConfig.from_dict(found["config"])
    file = Path(bundle_dir) / found["file"]
    if not found["file"].startswith(f"{PRIVATE_PATH}/") or ".." in found["file"]:
        raise ConfigError(f"the bundle's private path names a file outside {PRIVATE_PATH}/")
    if not file.is_file() or sha256_file(file) != found["sha256"]:
        raise ConfigError(f"bundle file {found['file']} is missing or does not match the manifest (corrupt or modified)")
    try:
        tensors = st_load(file.read_bytes())
    except (OSError, SafetensorError) as exc:
        raise ConfigError(f"cannot read {file}: {exc}") from exc
    clean = None
    if config.clean:
        clean = tensors.get("clean_embed")
        if clean is None or tuple(clean.shape) != (spec.vocab_size, spec.hidden_size):
            raise ConfigError(f"{found['file']} does not hold the clean table [{spec.vocab_size}, {spec.hidden_size}]")
        clean = private_rows(clean.to(dtype or clean.dtype), permutation)
    module = PrivatePath(config, spec.hidden_size, bundle_secret(permutation, manifest.bundle_id),
                         basis=tensors.get("basis"), clean_table=clean)
    name, param = ("gate", module.gate) if config.clean else ("local.weight", module.local.weight)
    weight = tensors.get(name)
    if weight is None or tuple(weight.shape) != tuple(param.shape):
        raise ConfigError(f"{found['file']} does not hold the path's {name} of shape {tuple(param.shape)}")
    with torch.no_grad():
        param.copy_(weight)
    return module.eval().requires_grad_(False)

