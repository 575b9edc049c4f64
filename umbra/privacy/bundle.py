"""The client bundle (DESIGN §3): everything the client holds for one base model, in one directory.

    manifest.json          base model id + weight hashes, split, ε, h, versions, adapters (no secrets)
    indvocab.safetensors   the INDVocab-randomized embedding table        (PUBLIC id order)
    client.safetensors     encoder blocks + decoder blocks, norm, LM head (PUBLIC id order)
    permutation.sealed     π, AES-256-GCM; its key is in the OS keyring only
    base/                  the public config and tokenizer files
    adapters/              one safetensors file per adapter (bundle_adapters.py)

Weights changed later (`save_client_weights`) and adapters get content-addressed names, and the
manifest (format 2) names the files in force, so replacing it commits any change atomically
(bundle_commit.py); version-1 bundles are read as they are.

Vocab-indexed tensors are stored in public order and permuted in memory at load time, so no file
reveals π, not even through row order. `init_bundle` builds the bundle in a temporary sibling
directory and renames it into place; it never replaces an existing bundle unless forced."""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import secrets
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

import umbra
from keys import KeyStore, KeyStoreError
from umbra.atomic import write_atomic
from umbra.errors import ConfigError, ValidationError
from umbra.model.adapters.modules import Adapter
from umbra.model.loader import load_client
from umbra.model.parts import ClientDecoder, ClientEncoder, SplitPlan
from umbra.model.spec import ModelSpec, load_spec
from umbra.privacy import sealed
from umbra.privacy.bundle_adapters import load_adapters
from umbra.privacy.bundle_commit import bundle_change
from umbra.privacy.bundle_private_path import load_private_path
from umbra.privacy.indvocab import INDVocab, INDVocabConfig
from umbra.privacy.ltokenizer import Permutation, PrivateTokenizer, public_rows, to_private_order_
from umbra.privacy.manifest import (BASE_DIR, DEFAULT_EPSILON, LTOKENIZER, MECHANISM, Manifest, epsilon_json, sha256_file,
                                    FILENAME as MANIFEST)

log = logging.getLogger(__name__)

INDVOCAB_FILE = "indvocab.safetensors"
CLIENT_FILE = "client.safetensors"
EMBED_KEY = "embed_tokens.weight"
PUBLIC_FILES = (  # copied from the base model directory when present
    "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
    "special_tokens_map.json", "vocab.json", "merges.txt", "tokenizer.model", "added_tokens.json",
    "chat_template.jinja",
)


@dataclass(frozen=True)
class BundleConfig:
    epsilon: float = DEFAULT_EPSILON  # total ε of an embedding row (Σ ε_i); math.inf = no INDVocab noise
    h: float = 0.25  # INDVocab temperature
    split: SplitPlan | None = None  # None: SplitPlan.default(num_layers)
    seed: bytes | int | None = None  # INDVocab randomness; None = `secrets` (only tests pass a seed)


@dataclass(eq=False)
class ClientBundle:
    dir: Path
    manifest: Manifest
    spec: ModelSpec
    plan: SplitPlan
    encoder: ClientEncoder  # randomized table, rows in private order
    decoder: ClientDecoder  # LM head rows in private order: logits come out in private order
    permutation: Permutation = field(repr=False)
    tokenizer: PrivateTokenizer | None = None  # only when load_bundle was given a tokenizer_loader
    adapters: dict[str, Adapter] = field(default_factory=dict)  # name -> adapter (manifest.adapters)
    private_path: object | None = None  # PrivatePath (umbra/privacy/bundle_private_path.py), if it has one


CLIENT_WEIGHTS_DP = "client_weights_dp"  # manifest privacy key: the DP record of DP-tuned client weights
STUNING = "stuning"  # manifest privacy key: the STuning record of `umbra tune` (umbra/privacy/mode.py)


def default_bundle_dir(base_dir: str | Path) -> Path:
    data = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return data / "umbra" / "bundles" / Path(base_dir).resolve().name


def _native_dtype(spec: ModelSpec) -> torch.dtype:
    dtype = getattr(torch, spec.torch_dtype, None)
    return dtype if isinstance(dtype, torch.dtype) and dtype.is_floating_point else torch.float32


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _write_tensors(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    write_atomic(path, _tensor_bytes(tensors))


def _tensor_bytes(tensors: dict[str, torch.Tensor]) -> bytes:
    data = {k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}
    return st_save(data, metadata={"row_order": "public"})


def _client_tensors(encoder: ClientEncoder, decoder: ClientDecoder) -> tuple[dict, dict]:
    """(indvocab tensors, client tensors) from modules whose vocab rows are in the order given."""
    enc = encoder.state_dict()
    table = {EMBED_KEY: enc.pop(EMBED_KEY)}
    client = {f"encoder.{k}": v for k, v in enc.items()}
    client.update({f"decoder.{k}": v for k, v in decoder.state_dict().items()})
    return table, client


def _file_hashes(bundle_dir: Path, weights: tuple[str, ...] = (INDVOCAB_FILE, CLIENT_FILE)) -> dict[str, str]:
    names = list(weights) + sorted(
        f"{BASE_DIR}/{p.name}" for p in (bundle_dir / BASE_DIR).iterdir() if p.is_file()
    )
    return {n: sha256_file(bundle_dir / n) for n in names}  # permutation.sealed: GCM authenticates it


def _base_info(base: Path, spec: ModelSpec, dtype: torch.dtype) -> dict:
    weights = sorted(p.name for p in base.iterdir() if p.suffix == ".safetensors" or p.name.endswith(".index.json"))
    name = json.loads((base / "config.json").read_text()).get("_name_or_path") or base.resolve().name
    return dict(
        model_id=name, path=str(base.resolve()), family=spec.family, vocab_size=spec.vocab_size,
        hidden_size=spec.hidden_size, num_layers=spec.num_layers, dtype=str(dtype).replace("torch.", ""),
        weights={w: sha256_file(base / w) for w in weights},
    )


def _check_target(out: Path, force: bool) -> str | None:
    """Refuse to clobber anything; with force, allow replacing an existing *bundle* (returns its id)."""
    if not out.exists() or (out.is_dir() and not any(out.iterdir())):
        return None
    if not (out / MANIFEST).is_file():
        raise ConfigError(f"{out} exists and is not an Umbra client bundle; refusing to touch it (even with --force)")
    if not force:
        raise ConfigError(f"{out} already holds a client bundle; refusing to overwrite it. Pass --force to replace it "
                          "(the old bundle and its permutation key are deleted).")
    return Manifest.read(out).bundle_id


def init_bundle(
    base_dir: str | Path,
    config: BundleConfig,
    out_dir: str | Path | None = None,
    *,
    force: bool = False,
    store: KeyStore | None = None,
    progress: Callable[[int, int], None] | None = None,  # INDVocab columns done / total
) -> Manifest:
    base = Path(base_dir)
    out = Path(out_dir) if out_dir is not None else default_bundle_dir(base)
    spec = load_spec(base)
    plan = config.split or SplitPlan.default(spec.num_layers)
    plan.validate(spec.num_layers)
    indvocab = INDVocab(INDVocabConfig(config.epsilon, config.h))
    old_id = _check_target(out, force)
    store = store or KeyStore()  # fail before the heavy work if there is no OS keyring
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.init-{secrets.token_hex(6)}"
    tmp.mkdir(mode=0o700)
    bundle_id, key_id = secrets.token_hex(16), None
    try:
        dtype = _native_dtype(spec)
        encoder, decoder = load_client(base, plan, dtype)
        with torch.no_grad():
            encoder.embed_tokens.weight.copy_(indvocab.randomize(encoder.embed_tokens.weight, config.seed, progress=progress))
        table, client = _client_tensors(encoder, decoder)
        _write_tensors(tmp / INDVOCAB_FILE, table)
        _write_tensors(tmp / CLIENT_FILE, client)
        (tmp / BASE_DIR).mkdir()
        for name in PUBLIC_FILES:
            if (base / name).is_file():
                shutil.copyfile(base / name, tmp / BASE_DIR / name)
        key_id = sealed.create(tmp, Permutation.random(spec.vocab_size), bundle_id, store)
        d = spec.hidden_size
        manifest = Manifest(
            bundle_id=bundle_id, created=_now(), base=_base_info(base, spec, dtype),
            split=dict(encoder_blocks=plan.encoder_blocks, decoder_blocks=plan.decoder_blocks),
            privacy=dict(mechanism=MECHANISM, epsilon=epsilon_json(config.epsilon),
                         feature_epsilon=epsilon_json(config.epsilon / d), h=config.h,
                         guess_bound=indvocab.guess_bound(spec.vocab_size), ltokenizer=LTOKENIZER),
            versions=_versions(), files=_file_hashes(tmp),
        )
        write_atomic(tmp / MANIFEST, manifest.to_json().encode())
        _swap_into_place(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if key_id is not None:
            sealed.delete_keys(bundle_id, store)
        raise
    if old_id is not None:
        try:
            sealed.delete_keys(old_id, store)
        except KeyStoreError as exc:
            log.warning("the replaced bundle's key could not be removed from the keyring: %s", exc)
    return manifest


def _swap_into_place(tmp: Path, out: Path) -> None:
    if out.exists():
        trash = out.parent / f".{out.name}.old-{secrets.token_hex(6)}"
        os.replace(out, trash)
        os.replace(tmp, out)
        shutil.rmtree(trash)
    else:
        os.replace(tmp, out)


def _versions() -> dict:
    from importlib.metadata import version  # transformers' own import costs ~1 CPU s

    return dict(umbra=umbra.__version__, torch=torch.__version__, transformers=version("transformers"),
                numpy=np.__version__)


def _read_tensors(path: Path) -> dict[str, torch.Tensor]:
    try:
        return st_load(path.read_bytes())
    except (OSError, SafetensorError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc


def _build(cls, spec: ModelSpec, plan: SplitPlan, state: dict, dtype: torch.dtype | None):
    with torch.device("meta"):
        module = cls(spec, plan)
    try:
        module.load_state_dict({k: v if dtype is None else v.to(dtype) for k, v in state.items()}, assign=True, strict=True)
    except RuntimeError as exc:
        raise ConfigError(f"bundle weights do not fit {cls.__name__}: {exc}") from exc
    module.stack.inv_freq = spec.rope_inv_freq.clone()
    return module.eval().requires_grad_(False)


def load_bundle(
    bundle_dir: str | Path,
    *,
    store: KeyStore | None = None,
    tokenizer_loader: Callable[[Path], object] | None = None,  # base dir -> public tokenizer (ClientTokenizer.from_dir)
    dtype: torch.dtype | None = None,  # None: as stored (the base checkpoint's dtype)
    verify: bool = True,  # check every file against its manifest hash
) -> ClientBundle:
    d = Path(bundle_dir)
    manifest = Manifest.read(d)
    if verify:
        for name, digest in manifest.files.items():
            if not (d / name).is_file() or sha256_file(d / name) != digest:
                raise ConfigError(f"bundle file {name} is missing or does not match the manifest (corrupt or modified)")
    spec = load_spec(d / BASE_DIR)
    plan = SplitPlan(manifest.split["encoder_blocks"], manifest.split["decoder_blocks"])
    plan.validate(spec.num_layers)
    client = _read_tensors(d / manifest.weights["client"])
    enc_state = {k[8:]: v for k, v in client.items() if k.startswith("encoder.")}
    enc_state[EMBED_KEY] = _read_tensors(d / manifest.weights["indvocab"]).get(EMBED_KEY)
    dec_state = {k[8:]: v for k, v in client.items() if k.startswith("decoder.")}
    encoder = _build(ClientEncoder, spec, plan, enc_state, dtype)
    decoder = _build(ClientDecoder, spec, plan, dec_state, dtype)
    perm = sealed.open_(d, manifest.bundle_id, store or KeyStore())
    to_private_order_(encoder, decoder, perm)
    tokenizer = None if tokenizer_loader is None else PrivateTokenizer(tokenizer_loader(d / BASE_DIR), perm)
    adapters = load_adapters(d, manifest, spec, plan.shape(spec.num_layers), dtype)
    private_path = load_private_path(d, manifest, spec, perm, encoder.embed_tokens.weight.dtype)
    return ClientBundle(d, manifest, spec, plan, encoder, decoder, perm, tokenizer, adapters, private_path)


def save_client_weights(bundle: ClientBundle, encoder: ClientEncoder | None = None,
                        decoder: ClientDecoder | None = None, dp: dict | None = None,
                        stuning: dict | None = None) -> Manifest:
    """Write (e.g. split-fine-tuned) client weights back, vocab rows in public order again. `dp`:
    the DP record of the training that produced them (NOESIS `--family full`), kept in the
    manifest's privacy section as `client_weights_dp`; `stuning`: the STuning record of `umbra
    tune` (its trajectory and `cloud_lora`), kept as `stuning` — the privacy mode's key
    (umbra/privacy/mode.py). Weights written without one drop an old one of each."""
    encoder, decoder = encoder or bundle.encoder, decoder or bundle.decoder
    table, client = _client_tensors(encoder, decoder)
    table[EMBED_KEY] = public_rows(table[EMBED_KEY], bundle.permutation)
    client["decoder.lm_head.weight"] = public_rows(client["decoder.lm_head.weight"], bundle.permutation)
    with bundle_change(bundle.dir) as change:
        weights = change.manifest.weights
        stored = _read_tensors(bundle.dir / weights["client"])
        stored_table = _read_tensors(bundle.dir / weights["indvocab"])
        for new, old in ((client, stored), (table, stored_table)):
            if set(new) != set(old) or any(old[k].shape != new[k].shape for k in new):
                raise ValidationError("the modules' weights do not match the bundle's (extra, missing or reshaped tensors)")
        weights["indvocab"] = change.store("", "indvocab", _tensor_bytes(
            {k: v.to(stored_table[k].dtype) for k, v in table.items()}))
        weights["client"] = change.store("", "client", _tensor_bytes({k: v.to(stored[k].dtype) for k, v in client.items()}))
        change.manifest.files = _file_hashes(bundle.dir, (weights["indvocab"], weights["client"]))
        if dp is None:
            change.manifest.privacy.pop(CLIENT_WEIGHTS_DP, None)
        else:
            change.manifest.privacy[CLIENT_WEIGHTS_DP] = dp
        if stuning is None:
            change.manifest.privacy.pop(STUNING, None)
        else:
            change.manifest.privacy[STUNING] = stuning
    bundle.manifest = Manifest.read(bundle.dir)
    return bundle.manifest


def rotate_bundle_key(bundle_dir: str | Path, store: KeyStore | None = None) -> tuple[str, str]:
    """New permutation key; π re-encrypted atomically (see sealed.rotate). Returns (old, new) key ids."""
    d = Path(bundle_dir)
    return sealed.rotate(d, Manifest.read(d).bundle_id, store or KeyStore())
