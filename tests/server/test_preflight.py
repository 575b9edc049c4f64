"""server/preflight.py, through the real service's entry point (server.serve.main, which `python -m
server` and `umbra cloud serve` run): a device this machine lacks, a dtype the device cannot run, a
missing shard or a shape that disagrees with config.json stops the start with one line, before the
port is bound (no ready file, so no client was ever accepted); a service that starts runs the middle
in the dtype asked for, on its device, within that dtype's documented tolerance of the monolithic
model, and reports its memory plan at start and in /metrics.

One refusal runs as the real process (`python -m server`: exit status 2, one line, no traceback);
the others call the same entry point in this process, and the services that start are the real app
under uvicorn on a loopback socket in a thread of this process (server.launch.local_cloud_thread)."""

from __future__ import annotations

import json
import logging
import shutil
import sys
import tempfile
from pathlib import Path

import httpx
import pytest
import torch

from server.launch import local_cloud_sync, local_cloud_thread
from server.serve import main as serve_main
from umbra.engine import ClientModel
from umbra.engine.runner import MonolithicRunner, SplitRunner
from umbra.errors import CloudUnavailable, UmbraError
from umbra.middle.remote import RemoteMiddle
from umbra.model.parts import SplitPlan

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from synthetic_model import build  # noqa: E402

PLAN = SplitPlan(1, 1)
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA accelerator")
# Largest |split - monolithic fp32| of the logits, relative to the largest |logit|, per cloud dtype
# (docs/ARCHITECTURE.md, "The cloud on a device"): fp32 is the monolithic arithmetic; bf16 keeps 8
# bits of mantissa through every middle block, fp16 11.
TOLERANCE = {"fp32": 1e-5, "bf16": 2e-2, "fp16": 5e-3}  # measured on CPU: fp32 3e-7, bf16 4e-3


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> Path:
    """The small synthetic model (fp32), one layer per shard."""
    return build(tmp_path_factory.mktemp("syn"), "small", torch.float32, shard_bytes=1,
                 overrides=dict(hidden_size=128, intermediate_size=256))


def refused_by_the_process(model_dir, **settings) -> str:
    """The log of a `python -m server` start that must fail: it exited (before writing its ready
    file) with status 2 and one line, no traceback."""
    with pytest.raises(CloudUnavailable, match=r"exited with status 2") as err:
        with local_cloud_sync(model_dir, PLAN, settings={"torch_threads": 1, **settings}, startup_timeout=120):
            pass
    lines = [line for line in str(err.value).splitlines() if line.startswith("umbra cloud: error:")]
    assert len(lines) == 1 and "Traceback" not in str(err.value)
    return lines[0]


def refused(model_dir, **settings) -> str:
    """The one-line error of a start that must fail, through the service's entry point in this
    process (settings as UMBRA_CLOUD_* variables, as server.launch passes them): an UmbraError (what
    `python -m server` prints as its one line and exits 2 on) before the port is bound: no ready
    file was written. A start that wrongly passes does not serve on: it is told its launcher is
    gone (--exit-with-parent -1, no process's parent), stops, and the test fails."""
    with pytest.MonkeyPatch.context() as env, tempfile.TemporaryDirectory(prefix="umbra-refused-") as tmp:
        for name, value in {"torch_threads": 1, **settings}.items():
            env.setenv(f"UMBRA_CLOUD_{name.upper()}", str(value))
        ready = Path(tmp) / "ready.json"
        with pytest.raises(UmbraError) as err:
            serve_main(["--model-dir", str(model_dir), "--host", "127.0.0.1", "--port", "0",
                        "--token-file", str(Path(tmp) / "tokens.json"), "--ready-file", str(ready), "--exit-with-parent", "-1",
                        "--encoder-blocks", str(PLAN.encoder_blocks), "--decoder-blocks", str(PLAN.decoder_blocks)])
        assert not ready.exists()
    line = f"umbra cloud: error: {err.value}"
    assert "\n" not in line
    return line


def test_a_cuda_device_this_machine_lacks(synthetic):
    if torch.cuda.is_available():  # one past its last accelerator
        assert "CUDA device(s)" in refused(synthetic, device=f"cuda:{torch.cuda.device_count()}")
    else:
        assert "no CUDA accelerator" in refused(synthetic, device="cuda")


def test_a_dtype_the_device_cannot_run(synthetic):
    assert "float16 on the CPU is not served" in refused(synthetic, device="cpu", dtype="fp16")
    assert "dtype must be bf16, fp16 or fp32" in refused(synthetic, dtype="fp8")


def test_a_missing_shard_and_a_shape_that_disagrees_with_config(synthetic, tmp_path):
    missing = shutil.copytree(synthetic, tmp_path / "missing")
    index = json.loads((missing / "model.safetensors.index.json").read_text())["weight_map"]
    (missing / index["model.layers.2.self_attn.q_proj.weight"]).unlink()
    line = refused_by_the_process(missing)
    assert "is missing" in line and index["model.layers.2.self_attn.q_proj.weight"] in line

    wrong = shutil.copytree(synthetic, tmp_path / "wrong")
    config = json.loads((wrong / "config.json").read_text())
    (wrong / "config.json").write_text(json.dumps({**config, "num_key_value_heads": 4}))
    assert "k_proj.weight" in (line := refused(wrong)) and "disagrees with config.json" in line


async def split_vs_monolithic(model_dir: Path, dtype: str, device: str, caplog) -> tuple[float, dict, str, str]:
    """(relative error, /v1/info, /metrics text, cloud log) of a prefill + 6 decode steps through the
    real cloud in `dtype` on `device`, against the monolithic fp32 model."""
    model = ClientModel.load(model_dir, PLAN)
    monolithic = MonolithicRunner(model.encoder, model.load_middle(), model.decoder)
    ids = torch.randint(10, 2000, (16,), generator=torch.Generator().manual_seed(5)).tolist()
    settings = {"torch_threads": 1, "dtype": dtype, "device": device}
    with caplog.at_level(logging.WARNING, logger="umbra.cloud"), local_cloud_thread(model_dir, PLAN, settings=settings) as cloud:
        remote = RemoteMiddle(cloud.base_url, cloud.token, hidden_size=model.spec.hidden_size)
        split = SplitRunner(model.encoder, model.decoder, remote)
        errors, scale = [], 0.0
        for step in [ids] + [[i] for i in (3, 99, 1500, 7, 42, 1024)]:
            ref, got = await monolithic.run(step), await split.run(step)
            errors.append((got - ref).abs().max().item())
            scale = max(scale, ref.abs().max().item())
        await split.close()
        await remote.aclose()
        async with httpx.AsyncClient(base_url=cloud.base_url, headers={"Authorization": f"Bearer {cloud.token}"}) as h:
            info, metrics = (await h.get("/v1/info")).json(), (await h.get("/metrics")).text
        log = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("umbra.cloud"))
    return max(errors) / scale, info, metrics, log


@pytest.mark.parametrize("dtype,name", [("fp32", "float32"), ("bf16", "bfloat16")])
async def test_the_cloud_in_each_cpu_dtype_is_within_its_tolerance_of_the_monolithic_model(synthetic, dtype, name, caplog):
    error, info, metrics, log = await split_vs_monolithic(synthetic, dtype, "cpu", caplog)
    print(f"{dtype}: relative error {error:.2e}")
    assert info["dtype"] == name and error <= TOLERANCE[dtype]
    if dtype == "bf16":
        assert error > TOLERANCE["fp32"]  # the middle really ran in bf16 (the wire stayed fp32)
    gauges = {line.split()[0]: float(line.split()[1]) for line in metrics.splitlines()
              if line.startswith(("umbra_cloud_device_free_bytes", "umbra_cloud_kv_", "umbra_cloud_decode_width"))}
    assert gauges["umbra_cloud_device_free_bytes"] > 0 and gauges["umbra_cloud_kv_budget_bytes"] > 0
    per_position = 2 * 2 * 2 * 32 * (4 if dtype == "fp32" else 2)  # 2 middle layers, 2 KV heads of 32
    # (the metrics print 6 significant digits)
    assert gauges["umbra_cloud_kv_positions_budget"] == pytest.approx(gauges["umbra_cloud_kv_budget_bytes"] / per_position,
                                                                      rel=1e-5)
    assert gauges["umbra_cloud_kv_budget_bytes"] == pytest.approx(gauges["umbra_cloud_device_free_bytes"] / 2, rel=1e-5)
    assert "KV budget" in log and "on cpu (50% of" in log and f"{name} on cpu" in log


@needs_cuda
@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
async def test_on_cuda_the_middle_and_its_caches_run_there_within_the_dtypes_tolerance(synthetic, dtype, caplog):
    if dtype == "bf16" and not torch.cuda.is_bf16_supported():
        assert "no bf16 support" in refused(synthetic, device="cuda", dtype=dtype)
        return
    error, info, metrics, log = await split_vs_monolithic(synthetic, dtype, "cuda", caplog)
    assert error <= max(TOLERANCE[dtype], 1e-4) and "on cuda:0" in log  # fp32: another kernel library
    assert "umbra_cloud_device_free_bytes" in metrics
