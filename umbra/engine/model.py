"""ClientModel: what the client loads from a model directory — spec, split plan, tokenizer, FIM
format and the client parts (encoder, decoder). The monolithic baseline additionally loads the
middle blocks, which a split client never reads.

`ClientModel.from_bundle(bundle_dir)` loads a client bundle (`umbra init`) instead: the
INDVocab-randomized embedding and the LM head with rows in private order, and a tokenizer whose
ids are private (π(public id); special ids, EOS and the vocab mask too). Logits then come out in
private order and everything above (FIM, sampling, stops) works unchanged; the cloud runs the
base model's public middle blocks either way.

A bundle's adapters come with it: `model.adapters` (name -> Adapter) and `model.router`, which
maps a request's language to the adapters that serve it; `model.adapter_set(names)` gives the
frozen `AdapterSet` of those names (built once per distinct set). `model.unlock()` runs
SecureGate's gating pass (umbra/securegate/access.py) and names the revealing adapter this
user's access keys open, if any."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import torch

from umbra.engine.fim import FimFormat, detect_format
from umbra.engine.routing import AdapterRole, AdapterRouter
from umbra.engine.tokenizer import ClientTokenizer
from umbra.errors import ConfigError
from umbra.model.adapters.modules import Adapter
from umbra.model.adapters.selection import EMPTY, AdapterSet
from umbra.model.device import device_of
from umbra.model.loader import Checkpoint, load_part
from umbra.model.parts import ClientDecoder, ClientEncoder, MiddleBlocks, SplitPlan
from umbra.model.spec import ModelSpec, load_spec


def check_model_dir(model_dir: str | Path) -> Path:
    """ConfigError with a clear message unless `model_dir` holds config, tokenizer and weights."""
    d = Path(model_dir)
    if not d.is_dir():
        raise ConfigError(f"model directory {d} does not exist (pass --model DIR)")
    missing = [name for name in ("config.json", "tokenizer.json") if not (d / name).is_file()]
    has_weights = (d / "model.safetensors").is_file() or (d / "model.safetensors.index.json").is_file()
    if not has_weights:
        missing.append("model.safetensors")
    if missing:
        hint = " (is the model still training?)" if missing == ["model.safetensors"] else ""
        raise ConfigError(f"model directory {d} is incomplete: missing {', '.join(missing)}{hint}")
    return d


@dataclass
class ClientModel:
    model_dir: Path
    spec: ModelSpec
    plan: SplitPlan
    tokenizer: ClientTokenizer
    fim: FimFormat
    encoder: ClientEncoder
    decoder: ClientDecoder
    checkpoint: Checkpoint | None  # None: a bundle's model; opened on demand by load_middle
    dtype: torch.dtype = torch.float32
    bundle: object | None = field(default=None, repr=False)  # the ClientBundle it came from, if any
    adapters: dict[str, Adapter] = field(default_factory=dict, repr=False)  # the bundle's adapters
    router: AdapterRouter = field(default_factory=AdapterRouter)  # language -> adapter names
    _sets: OrderedDict = field(default_factory=OrderedDict, repr=False)  # names -> frozen AdapterSet
    access: object | None = field(default=None, repr=False)  # a bundle's AccessControl (umbra/securegate/access.py)
    _access_generation: int = field(default=-1, repr=False)
    # the private local path (umbra/model/private_path.py) the runners apply; a bundle's, if it has one
    private_path: object | None = field(default=None, repr=False)

    def unlock(self) -> str | None:
        """The revealing adapter this user's access keys unlock for the next request, decrypted into
        `adapters` (in memory only); None when none does: the secure adapter serves. Runs the
        gating pass on the client alone; a rotation or revocation on disk takes effect here."""
        if self.access is None:
            return None
        unlocked = self.access.unlock()
        if self.access.generation != self._access_generation:  # the bundle's access section changed
            self._access_generation = self.access.generation
            for name in self.router.revealing:
                self.adapters.pop(name, None)
            self.router.revealing = set(self.access.revealing)
            self._sets.clear()
        if unlocked is None:
            return None
        if self.adapters.get(unlocked.name) is not unlocked.adapter:
            self.adapters[unlocked.name] = unlocked.adapter
            for key in [k for k in self._sets if unlocked.name in k]:
                del self._sets[key]
        return unlocked.name

    def adapter_set(self, names: tuple[str, ...]) -> AdapterSet:
        """The frozen AdapterSet of these adapters (ConfigError naming an unknown one)."""
        if not names:
            return EMPTY
        key = tuple(sorted(names))
        found = self._sets.get(key)
        if found is None:
            unknown = [n for n in key if n not in self.adapters]
            if unknown:
                raise ConfigError(f"unknown adapter {unknown[0]!r} (this model has: "
                                  f"{', '.join(sorted(self.adapters)) or 'none'})")
            found = AdapterSet([self.adapters[n] for n in key]).check_client(self.plan.shape(self.spec.num_layers))
            self._sets[key] = found
            while len(self._sets) > 8:  # distinct sets in use stay few (experts x access states); each may hold merged weights
                self._sets.popitem(last=False)
        self._sets.move_to_end(key)
        return found

    @property
    def device(self) -> torch.device:
        """Where the client's parts (and the in-process middle load_middle gives) live."""
        return device_of(self.encoder)

    @classmethod
    def load(cls, model_dir: str | Path, plan: SplitPlan | None = None,
             dtype: torch.dtype = torch.float32, device: torch.device | None = None) -> "ClientModel":
        """A plain model directory's client parts, on `device` (None: the CPU)."""
        d = check_model_dir(model_dir)
        spec = load_spec(d)
        plan = plan or SplitPlan.default(spec.num_layers)
        plan.validate(spec.num_layers)
        tokenizer = ClientTokenizer.from_dir(d)
        if tokenizer.size > spec.vocab_size:
            raise ConfigError(f"tokenizer has {tokenizer.size} tokens but the model only {spec.vocab_size}")
        fim = detect_format(tokenizer)
        ckpt = Checkpoint(d)
        encoder = load_part(d, "encoder", plan, dtype, spec, ckpt, device)
        decoder = load_part(d, "decoder", plan, dtype, spec, ckpt, device)
        return cls(d, spec, plan, tokenizer, fim, encoder, decoder, ckpt, dtype)

    @classmethod
    def from_bundle(cls, bundle_dir: str | Path, base_dir: str | Path | None = None, *, store=None,
                    dtype: torch.dtype = torch.float32) -> "ClientModel":
        """A client bundle's model. `base_dir`: the public base model (the middle for --local or a
        self-started cloud; default: the path the bundle was made from). `store`: the KeyStore
        holding the bundle's key (default: the OS keyring's "umbra" service)."""
        from keys import KeyStore
        from umbra.privacy.bundle import BASE_DIR, load_bundle
        from umbra.securegate.access import AccessControl

        bundle = load_bundle(bundle_dir, store=store, dtype=dtype, tokenizer_loader=ClientTokenizer.from_dir)
        tokenizer = ClientTokenizer.from_dir(bundle.dir / BASE_DIR, permutation=bundle.permutation)
        if tokenizer.size > bundle.spec.vocab_size:
            raise ConfigError(f"tokenizer has {tokenizer.size} tokens but the model only {bundle.spec.vocab_size}")
        base = Path(base_dir) if base_dir is not None else Path(bundle.manifest.base["path"])
        roles = [AdapterRole(name, e.role, e.language) for name, e in bundle.manifest.adapter_entries().items()]
        access = AccessControl(bundle.dir, bundle.encoder, store if store is not None else KeyStore(), dtype)
        return cls(base, bundle.spec, bundle.plan, tokenizer, detect_format(tokenizer), bundle.encoder,
                   bundle.decoder, None, dtype, bundle, bundle.adapters, AdapterRouter(roles), access=access,
                   private_path=bundle.private_path)

    def check_base(self) -> Path:
        """The base model directory, checked to be the one a bundle was made from (weight hashes);
        ConfigError otherwise. Plain models: just that the directory is complete."""
        d = check_model_dir(self.model_dir)
        if self.bundle is not None:
            from umbra.privacy.manifest import sha256_file

            expected = self.bundle.manifest.base.get("weights", {})
            if any(not (d / f).is_file() or sha256_file(d / f) != h for f, h in expected.items()):
                raise ConfigError(f"{d} is not the base model this bundle was made from (weights differ); "
                                  f"pass the right one with --model")
        return d

    def load_middle(self) -> MiddleBlocks:
        """The middle blocks, for the monolithic baseline or an in-process LocalMiddle (on the
        client's device)."""
        if self.checkpoint is None:
            self.checkpoint = Checkpoint(self.check_base())
        return load_part(self.model_dir, "middle", self.plan, self.dtype, self.spec, self.checkpoint, self.device)
