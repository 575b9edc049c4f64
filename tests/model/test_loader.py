"""umbra/model/loader.py: each side reads only its own tensors, so a directory holding only its own
shards serves it (the client's split against the real cloud serving a middle-only directory gives
the monolithic logits); a missing shard or a shape that disagrees with config.json is refused by
name before anything is read; a part loaded in another dtype is cast tensor by tensor (its peak
memory is the part once plus one checkpoint tensor)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from synthetic_model import build  # noqa: E402

from server.launch import local_cloud_thread  # noqa: E402
from umbra.engine import ClientModel  # noqa: E402
from umbra.engine.runner import MonolithicRunner, SplitRunner  # noqa: E402
from umbra.errors import ModelLoadError  # noqa: E402
from umbra.middle.remote import RemoteMiddle  # noqa: E402
from umbra.model.loader import Checkpoint, check_part, load_part  # noqa: E402
from umbra.model.parts import SplitPlan  # noqa: E402
from umbra.model.spec import load_spec  # noqa: E402

PLAN = SplitPlan(1, 1)  # of 4 layers: the client holds 0 and 3, the cloud 1 and 2
MEASURE = Path(__file__).resolve().parents[2] / "benchmarks" / "part_memory.py"


@pytest.fixture(scope="module")
def sharded(tmp_path_factory) -> Path:
    """The small synthetic model, one layer per shard (fp32)."""
    return build(tmp_path_factory.mktemp("sharded"), "small", torch.float32, shard_bytes=1)


def only_shards_of(full: Path, out: Path, parts: list[str]) -> tuple[Path, set[str]]:
    """A copy of `full` without the shards that hold none of `parts`' tensors; returns it and the
    names of the shards left out."""
    shutil.copytree(full, out)
    ckpt, spec = Checkpoint(full), load_spec(full)
    for part in parts:
        load_part(full, part, PLAN, spec=spec, checkpoint=ckpt)
    needed = {ckpt.files[k].name for k in ckpt.read_keys}
    removed = {f.name for f in out.glob("model-*.safetensors")} - needed
    for name in removed:
        (out / name).unlink()
    return out, removed


async def test_each_side_serves_from_a_directory_without_the_other_sides_shards(sharded, tmp_path):
    client_dir, not_client = only_shards_of(sharded, tmp_path / "client", ["encoder", "decoder"])
    cloud_dir, not_cloud = only_shards_of(sharded, tmp_path / "cloud", ["middle"])
    assert not_client and not_cloud and not (not_client & not_cloud)  # each side lacks the other's
    with pytest.raises(ModelLoadError, match="shard model-.* is missing"):
        load_part(client_dir, "middle", PLAN)
    with pytest.raises(ModelLoadError, match="shard model-.* is missing"):
        ClientModel.load(cloud_dir, PLAN)

    full = ClientModel.load(sharded, PLAN)
    monolithic = MonolithicRunner(full.encoder, full.load_middle(), full.decoder)
    client = ClientModel.load(client_dir, PLAN)
    ids = torch.randint(10, 2000, (12,), generator=torch.Generator().manual_seed(3)).tolist()
    with local_cloud_thread(cloud_dir, PLAN, settings={"torch_threads": 1, "kv_budget_bytes": 2**24}) as cloud:
        remote = RemoteMiddle(cloud.base_url, cloud.token, hidden_size=client.spec.hidden_size)
        split = SplitRunner(client.encoder, client.decoder, remote)
        for runner in (monolithic, split):
            runner.logits = [await runner.run(ids)] + [await runner.run([i]) for i in (5, 77, 1999)]
        await split.close()
        await remote.aclose()
    for a, b in zip(split.logits, monolithic.logits):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


def test_a_missing_shard_and_a_wrong_shape_are_refused_by_name_before_a_read(sharded, tmp_path):
    broken = shutil.copytree(sharded, tmp_path / "broken")
    index = json.loads((broken / "model.safetensors.index.json").read_text())["weight_map"]
    (broken / index["model.layers.2.mlp.up_proj.weight"]).unlink()
    ckpt = Checkpoint(broken)
    with pytest.raises(ModelLoadError, match=r"shard model-\d+-of-\d+\.safetensors .* is missing"):
        load_part(broken, "middle", PLAN, checkpoint=ckpt)
    assert ckpt.read_keys == []  # refused before the first tensor was read

    config = json.loads((sharded / "config.json").read_text())
    wrong = shutil.copytree(sharded, tmp_path / "wrong")
    (wrong / "config.json").write_text(json.dumps({**config, "intermediate_size": 96}))
    shape = r"mlp\.gate_proj\.weight in model-\d+-of-\d+\.safetensors: shape \(128, 64\) disagrees with config\.json"
    with pytest.raises(ModelLoadError, match=shape):
        check_part(wrong, "middle", PLAN)
    assert check_part(sharded, "middle", PLAN) == sum(
        p.numel() for p in load_part(sharded, "middle", PLAN).parameters())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_the_dtype_asked_for_is_each_tensor_cast(sharded, dtype):
    ckpt = Checkpoint(sharded)
    part = load_part(sharded, "decoder", PLAN, dtype, checkpoint=ckpt)
    assert {t.dtype for t in part.parameters()} == {dtype}
    weight = Checkpoint(sharded).get("model.layers.3.mlp.up_proj.weight")
    assert weight.dtype == torch.float32 and torch.equal(part.stack.layers[0].mlp.up_proj.weight, weight.to(dtype))


def test_a_cast_part_never_holds_itself_twice(tmp_path):
    """Peak RSS while loading 5 middle blocks of an fp32 checkpoint (one file) in bf16: at most the
    part once, one checkpoint tensor and 16 MiB (reading the file, or the part in fp32, then casting
    would cost the whole part again)."""
    d = build(tmp_path / "m", "small", torch.float32, shard_bytes=10**10,
              overrides=dict(hidden_size=512, intermediate_size=2048, num_hidden_layers=8, num_attention_heads=8,
                             vocab_size=8192))
    out = subprocess.run([sys.executable, str(MEASURE), str(d), "middle", "bfloat16"], check=True,
                         capture_output=True, text=True).stdout
    m = json.loads(out)
    largest = 512 * 2048 * 4
    assert m["part_bytes"] > 30 * 2**20 and m["peak_delta"] <= m["part_bytes"] + largest + 16 * 2**20, m
