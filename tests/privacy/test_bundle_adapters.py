"""Bundle format 2: adapters are separate content-addressed files listed in the manifest (kind,
placement, role, file, hash, training, ε); manifest.json is the one commit point, so a change that
fails leaves the bundle byte for byte as it was; version-1 bundles are read as they are and
migrated by their first change; a newer manifest, a truncated or modified adapter file and an
unknown adapter name are clear errors naming what is wrong."""

from __future__ import annotations

import json

import pytest
import torch

from adapter_helpers import perturb
from tiny_models import build_tiny_model_dir
from umbra.engine import ClientModel
from umbra.errors import ConfigError
from umbra.model.adapters import LoraConfig, Placement, SoftPromptConfig, build_adapter
from umbra.model.parts import SplitPlan
from umbra.model.spec import load_spec
from umbra.privacy.bundle import BundleConfig, init_bundle, load_bundle
from umbra.privacy.bundle_adapters import add_adapter, remove_adapter
from umbra.privacy.bundle_commit import bundle_change
from umbra.privacy.manifest import FORMAT_VERSION, Manifest

TRAINING = {"method": "test", "steps": 0}


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("base-adapters")
    build_tiny_model_dir(d, family="qwen2-tied")
    return d


@pytest.fixture
def bundle(base_dir, tmp_path, keystore):
    out = tmp_path / "bundle"
    init_bundle(base_dir, BundleConfig(epsilon=float("inf")), out, store=keystore)
    return out


def _adapter(base_dir, name, config=None, seed=0):
    spec = load_spec(base_dir)
    shape = SplitPlan.default(spec.num_layers).shape(spec.num_layers)
    return perturb(build_adapter(name, config or LoraConfig(rank=2), spec, shape), seed=seed)


def _snapshot(d):
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()
            and p.name != ".lock"}


def test_adapters_are_listed_stored_and_loaded(bundle, base_dir, keystore):
    experts = {lang: _adapter(base_dir, lang, seed=i) for i, lang in enumerate(["python", "go", "java"])}
    for lang, adapter in experts.items():
        add_adapter(bundle, adapter, role="expert", language=lang, training=TRAINING)
    add_adapter(bundle, _adapter(base_dir, "shared", SoftPromptConfig(length=4)), role="shared",
                training=TRAINING, privacy={"epsilon": 1.0, "delta": 1e-6, "accountant": "rdp"})
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["format_version"] == 3 and set(manifest["adapters"]) == {"python", "go", "java", "shared"}
    entry = manifest["adapters"]["go"]
    assert entry["kind"] == "lora" and entry["placement"] == "decoder" and entry["role"] == "expert"
    assert entry["language"] == "go" and entry["file"].startswith("adapters/go.") and len(entry["sha256"]) == 64
    assert entry["training"] == TRAINING and entry["privacy"] is None and entry["parameters"] > 0
    assert manifest["adapters"]["shared"]["privacy"]["epsilon"] == 1.0
    loaded = load_bundle(bundle, store=keystore)
    for lang, adapter in experts.items():
        got = loaded.adapters[lang].state_dict()
        assert all(torch.equal(got[k], v) for k, v in adapter.state_dict().items())
    model = ClientModel.from_bundle(bundle, base_dir, store=keystore)
    for alias, expert in [("py", "python"), ("golang", "go"), ("Java", "java"), ("rust", None), (None, None)]:
        route = model.router.route(alias)
        assert route.expert == expert and "shared" in route.adapters
        assert set(model.adapter_set(route.adapters).names) == set(route.adapters)
    with pytest.raises(ConfigError, match="unknown adapter 'nope'"):
        model.adapter_set(("nope",))
    remove_adapter(bundle, "go")
    assert "go" not in Manifest.read(bundle).adapters
    assert not list((bundle / "adapters").glob("go.*"))  # swept after the commit
    with pytest.raises(ConfigError, match="no adapter named 'go'"):
        remove_adapter(bundle, "go")


def test_a_failed_change_leaves_the_bundle_as_it_was(bundle, base_dir):
    add_adapter(bundle, _adapter(base_dir, "python"), role="expert", language="python")
    before = _snapshot(bundle)
    with pytest.raises(RuntimeError):
        with bundle_change(bundle) as change:  # a crash half-way: new file written, manifest not
            change.store("adapters", "half", b"x" * 100)
            change.manifest.adapters.clear()
            raise RuntimeError("power cut")
    assert Manifest.read(bundle).adapters.keys() == {"python"}
    after = _snapshot(bundle)
    assert {k: v for k, v in after.items() if not k.startswith("adapters/half.")} == before
    bad = [
        (lambda: add_adapter(bundle, _adapter(base_dir, "python"), role="expert", language="python"), "already has"),
        (lambda: add_adapter(bundle, _adapter(base_dir, "p2", SoftPromptConfig()), role="expert",
                             language="python"), "only a shared one"),
        (lambda: add_adapter(bundle, _adapter(base_dir, "c", LoraConfig(placement=Placement.MIDDLE)), role="shared"),
         "cloud's blocks"),
        (lambda: add_adapter(bundle, _adapter(base_dir, "x"), role="expert"), "names its language"),
    ]
    for attempt, match in bad:
        with pytest.raises(ConfigError, match=match):
            attempt()
    add_adapter(bundle, _adapter(base_dir, "go"), role="expert", language="go")  # the next change sweeps
    assert not list((bundle / "adapters").glob("half.*"))


def test_bad_adapter_files_are_named_and_nothing_loads(bundle, base_dir, keystore):
    entry = add_adapter(bundle, _adapter(base_dir, "python"), role="expert", language="python")
    path = bundle / entry.file
    good = path.read_bytes()
    for corrupt in (good[: len(good) // 3], good[:-1] + bytes([good[-1] ^ 1])):
        path.write_bytes(corrupt)
        with pytest.raises(ConfigError, match=entry.file):
            load_bundle(bundle, store=keystore)
    path.unlink()
    with pytest.raises(ConfigError, match=entry.file):
        load_bundle(bundle, store=keystore)
    path.write_bytes(good)
    assert "python" in load_bundle(bundle, store=keystore).adapters


def test_version_1_bundles_are_read_as_they_are_and_migrate_on_change(bundle, base_dir, keystore):
    manifest = json.loads((bundle / "manifest.json").read_text())
    for key in ("weights", "adapters"):
        del manifest[key]
    manifest["format_version"] = 1
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    v1 = load_bundle(bundle, store=keystore)
    assert v1.adapters == {} and Manifest.read(bundle).format_version == 1
    add_adapter(bundle, _adapter(base_dir, "python"), role="expert", language="python")
    migrated = json.loads((bundle / "manifest.json").read_text())
    assert migrated["format_version"] == 3 and migrated["weights"]["client"] == "client.safetensors"
    assert "python" in load_bundle(bundle, store=keystore).adapters


def test_a_newer_manifest_is_refused_naming_it(bundle, base_dir):
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["format_version"] = FORMAT_VERSION + 1
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ConfigError, match=rf"manifest\.json has bundle format version {FORMAT_VERSION + 1}; this Umbra reads"):
        Manifest.read(bundle)
    before = _snapshot(bundle)
    with pytest.raises(ConfigError, match=f"format version {FORMAT_VERSION + 1}"):
        add_adapter(bundle, _adapter(base_dir, "p"), role="shared")
    assert _snapshot(bundle) == before
