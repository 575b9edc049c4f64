"""Adapter files: every kind round-trips through safetensors bit for bit; a truncated, reshaped,
foreign or modified file is a ConfigError that names it; a trained LoRA exported to peft and
loaded with `peft.PeftModel.from_pretrained` on the transformers model gives Umbra's logits."""

from __future__ import annotations

import json
import struct

import pytest
import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from adapter_helpers import perturb, train_steps
from umbra.errors import ConfigError
from umbra.model.adapters import (AdapterSet, BottleneckConfig, DeepPromptConfig, LoraConfig, Placement,
                                  SoftPromptConfig, build_adapter)
from umbra.model.adapters.files import export_peft, read_adapter, save_adapter
from umbra.model.loader import load_client, load_middle
from umbra.model.parts import SplitPlan
from umbra.model.spec import load_spec

TOL = 1e-5
KINDS = [LoraConfig(rank=4, placement=Placement.CLIENT), BottleneckConfig(size=8), DeepPromptConfig(length=2),
         SoftPromptConfig(length=3)]


@pytest.fixture(scope="module")
def model(tiny_model_dirs):
    d = tiny_model_dirs["qwen2-untied"]
    spec = load_spec(d)
    return spec, SplitPlan.default(spec.num_layers).shape(spec.num_layers)


@pytest.mark.parametrize("config", KINDS, ids=lambda c: c.kind.value)
def test_round_trip_is_exact(model, config, tmp_path):
    spec, shape = model
    adapter = perturb(build_adapter("python", config, spec, shape))
    digest = save_adapter(adapter, tmp_path / "a.safetensors", spec, shape)
    back = read_adapter(tmp_path / "a.safetensors", spec, shape, expected_sha256=digest)
    assert back.name == "python" and back.config == adapter.config and back.blocks == adapter.blocks
    want, got = adapter.state_dict(), back.state_dict()
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)


def _saved(model, tmp_path):
    spec, shape = model
    adapter = perturb(build_adapter("python", LoraConfig(rank=4), spec, shape))
    path = tmp_path / "python.safetensors"
    return path, save_adapter(adapter, path, spec, shape)


def _rewrite(path, edit):
    """Re-save the file with its tensors or metadata edited by `edit(tensors, metadata)`."""
    data = path.read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    metadata = json.loads(data[8 : 8 + n])["__metadata__"]
    tensors = dict(st_load(data))
    edit(tensors, metadata)
    path.write_bytes(st_save(tensors, metadata=metadata))


def test_bad_files_are_errors_naming_the_file(model, tmp_path):
    spec, shape = model
    path, digest = _saved(model, tmp_path)
    good = path.read_bytes()
    cases = {
        "truncated": lambda: path.write_bytes(good[: len(good) // 2]),
        "not safetensors": lambda: path.write_bytes(b"\x00" * 64),
        "wrong shape": lambda: _rewrite(path, lambda t, m: t.update({k: t[k][:, :-1].contiguous() for k in list(t)[:1]})),
        "missing tensor": lambda: _rewrite(path, lambda t, m: t.pop(sorted(t)[0])),
        "foreign model": lambda: _rewrite(path, lambda t, m: m.update(model=m["model"].replace('"hidden_size": 64',
                                                                                                 '"hidden_size": 65'))),
        "other split": lambda: _rewrite(path, lambda t, m: m.update(model=m["model"].replace('"decoder_blocks": 2',
                                                                                               '"decoder_blocks": 3'))),
        "no metadata": lambda: path.write_bytes(st_save(dict(st_load(good)))),
        "bad config": lambda: _rewrite(path, lambda t, m: m.update(config='{"kind": "lora", "rank": -1}')),
        "NaN weights": lambda: _rewrite(path, lambda t, m: t[sorted(t)[0]].fill_(float("nan"))),
    }
    for why, corrupt in cases.items():
        corrupt()
        with pytest.raises(ConfigError, match=str(path)) as info:
            read_adapter(path, spec, shape)
        assert str(path) in str(info.value), why
        path.write_bytes(good)
    path.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))  # one bit: only the hash notices
    with pytest.raises(ConfigError, match="does not match its hash"):
        read_adapter(path, spec, shape, expected_sha256=digest)
    with pytest.raises(ConfigError, match="cannot read"):
        read_adapter(tmp_path / "absent.safetensors", spec, shape)


@pytest.mark.parametrize("family", ["llama", "qwen2-untied", "mistral"])
def test_peft_export_of_a_trained_lora_matches_umbra(family, tiny_model_dirs, hf_models, tmp_path):
    from peft import PeftModel

    d = tiny_model_dirs[family]
    spec = load_spec(d)
    plan = SplitPlan.default(spec.num_layers)
    enc, dec = load_client(d, plan)
    mid = load_middle(d, plan)
    lora = build_adapter("python", LoraConfig(rank=4, alpha=8.0, placement=Placement.CLIENT, init_seed=0),
                         spec, plan.shape(spec.num_layers))
    ids = torch.randint(0, 512, (2, 24), generator=torch.Generator().manual_seed(1))
    losses = train_steps(lora, enc, mid, dec, ids, steps=5)
    assert losses[-1] < losses[0]  # it learned something: B is no longer zero
    export_peft(lora, tmp_path / "peft", str(d))
    with torch.no_grad():
        plain = hf_models[family](ids).logits
    peft_model = PeftModel.from_pretrained(hf_models[family], tmp_path / "peft").eval()
    try:
        with torch.no_grad():
            want = peft_model(ids).logits
            pos = torch.arange(ids.shape[1])[None].expand(2, -1)
            aset = AdapterSet([lora])
            got = dec(mid(enc(ids, pos, adapters=aset), pos), pos, adapters=aset)
        assert (want - got).abs().max().item() <= TOL
        assert (want - plain).abs().max().item() > 1e-3  # the LoRA matters
    finally:
        peft_model.unload()  # give the shared reference model back without its LoRA layers
    with torch.no_grad():
        assert torch.equal(hf_models[family](ids).logits, plain)


def test_only_lora_exports_to_peft(model, tmp_path):
    spec, shape = model
    with pytest.raises(ConfigError, match="only LoRA"):
        export_peft(build_adapter("b", BottleneckConfig(), spec, shape), tmp_path)
