"""`umbra adapters`: add an adapter file to a bundle, list and show it (never weights), export a
LoRA to peft, remove it; unknown names and bad files are one-line errors (exit 2)."""

from __future__ import annotations

import json

import pytest

from adapter_helpers import perturb
from tiny_models import build_tiny_model_dir
from umbra.cli.main import main
from umbra.model.adapters import BottleneckConfig, LoraConfig, build_adapter
from umbra.model.adapters.files import save_adapter
from umbra.model.parts import SplitPlan
from umbra.model.spec import load_spec
from umbra.privacy.bundle import BundleConfig, init_bundle


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("base-cli-adapters")
    build_tiny_model_dir(d, family="qwen2-tied")
    return d


def test_add_list_show_export_remove(base_dir, tmp_path, keystore, capsys):
    bundle = tmp_path / "bundle"
    init_bundle(base_dir, BundleConfig(epsilon=float("inf")), bundle, store=keystore)
    spec = load_spec(base_dir)
    shape = SplitPlan.default(spec.num_layers).shape(spec.num_layers)
    lora = perturb(build_adapter("py", LoraConfig(rank=2), spec, shape))
    save_adapter(lora, tmp_path / "py.safetensors", spec, shape)
    save_adapter(build_adapter("bn", BottleneckConfig(size=4), spec, shape), tmp_path / "bn.safetensors", spec, shape)
    b = ["--bundle", str(bundle)]
    assert main(["adapters", "add", str(tmp_path / "py.safetensors"), "--role", "expert", "--language", "py",
                 "--name", "python", "--training", '{"method": "test"}', *b]) == 0
    assert main(["adapters", "add", str(tmp_path / "bn.safetensors"), "--role", "secure", *b]) == 0
    capsys.readouterr()
    assert main(["adapters", "list", *b]) == 0
    out = capsys.readouterr().out
    assert "python" in out and "lora" in out and "expert" in out and "bn" in out and "secure" in out
    assert main(["adapters", "list", "--json", *b]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["python"]["language"] == "python" and listed["python"]["training"] == {"method": "test"}
    assert main(["adapters", "show", "python", *b]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["name"] == "python" and "a" not in shown and shown["sha256"] == listed["python"]["sha256"]
    assert main(["adapters", "export-peft", "python", "--out", str(tmp_path / "peft"), *b]) == 0
    assert (tmp_path / "peft" / "adapter_config.json").is_file()
    assert (tmp_path / "peft" / "adapter_model.safetensors").is_file()
    capsys.readouterr()
    assert main(["adapters", "export-peft", "bn", "--out", str(tmp_path / "x"), *b]) == 2
    assert "only LoRA adapters export to peft" in capsys.readouterr().err
    assert main(["adapters", "show", "nope", *b]) == 2
    assert "no adapter named 'nope'" in capsys.readouterr().err
    (tmp_path / "bad.safetensors").write_bytes(b"\x10" * 40)
    assert main(["adapters", "add", str(tmp_path / "bad.safetensors"), "--role", "shared", *b]) == 2
    assert str(tmp_path / "bad.safetensors") in capsys.readouterr().err
    assert main(["adapters", "remove", "python", *b]) == 0
    assert main(["adapters", "remove", "python", *b]) == 2
    assert "no adapter named 'python'" in capsys.readouterr().err
