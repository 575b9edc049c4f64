"""umbra/model/device.py: a --device choice resolves to a device this machine has or to a
ConfigError (never a silent CPU fall back), and a module's device is its first tensor's; a model
loaded onto a device has every part there (on an accelerator: and computes what the CPU does)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from umbra.errors import ConfigError
from umbra.model.device import check_dtype, device_of, placed, resolve_device, resolve_dtype

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA accelerator")


def test_auto_is_the_accelerator_when_there_is_one():
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device("cpu") == torch.device("cpu") == resolve_device(torch.device("cpu"))


def test_cuda_is_cuda_or_an_error_naming_the_missing_accelerator():
    if torch.cuda.is_available():
        assert resolve_device("cuda") == resolve_device("auto") == torch.device("cuda", torch.cuda.current_device())
        with pytest.raises(ConfigError, match="CUDA device"):
            resolve_device(f"cuda:{torch.cuda.device_count()}")
    else:
        with pytest.raises(ConfigError, match="no CUDA accelerator"):
            resolve_device("cuda")


@pytest.mark.parametrize("choice", ["tpu", "gpu", "meta", ""])
def test_other_devices_are_refused(choice):
    with pytest.raises(ConfigError, match="device"):
        resolve_device(choice)


def test_a_modules_device_is_its_first_tensors():
    assert device_of(nn.Linear(2, 2)) == torch.device("cpu")
    assert device_of(nn.Sequential()) == torch.device("cpu")
    with torch.device("meta"):
        assert device_of(nn.Linear(2, 2)).type == "meta"
    norm = nn.BatchNorm1d(2, affine=False)  # buffers only
    assert device_of(norm.to("meta")).type == "meta"


def test_placed_skips_missing_modules_and_moves_nothing_without_a_device():
    lin = nn.Linear(2, 2)
    weight = lin.weight
    with placed(None, lin, None):
        assert device_of(lin).type == "cpu"
    with placed(torch.device("cpu"), None, lin):
        assert device_of(lin).type == "cpu"
    assert lin.weight is weight  # the same Parameter objects (optimizers holding them stay valid)


@needs_cuda
def test_placed_moves_to_the_accelerator_and_back_exactly():
    lin, norm = nn.Linear(3, 3), nn.BatchNorm1d(3)
    before = {k: v.clone() for k, v in {**lin.state_dict(), **norm.state_dict()}.items()}
    with placed(resolve_device("cuda"), lin, norm):
        assert device_of(lin).type == "cuda" and all(b.device.type == "cuda" for b in norm.buffers())
        with torch.no_grad():
            lin.weight.add_(1.0)
    after = {**lin.state_dict(), **norm.state_dict()}
    assert all(v.device.type == "cpu" for v in after.values())
    torch.testing.assert_close(after["weight"], before["weight"] + 1.0)
    assert all(torch.equal(after[k], before[k]) for k in before if k != "weight")


def test_a_model_loads_onto_the_device_asked_for(fim_qwen2_dir):
    from umbra.engine import ClientModel

    model = ClientModel.load(fim_qwen2_dir, device=torch.device("cpu"))
    middle = model.load_middle()
    assert model.device == torch.device("cpu") == device_of(middle)


@needs_cuda
def test_on_cuda_every_part_and_buffer_is_there_and_the_split_computes_what_the_cpu_does(fim_qwen2_dir):
    from umbra.engine import ClientModel

    cpu, gpu = ClientModel.load(fim_qwen2_dir), ClientModel.load(fim_qwen2_dir, device=resolve_device("cuda"))
    mid_cpu, mid_gpu = cpu.load_middle(), gpu.load_middle()
    for part in (gpu.encoder, gpu.decoder, mid_gpu):
        assert all(t.device.type == "cuda" for t in (*part.parameters(), *part.buffers()))
    ids = torch.randint(0, cpu.spec.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))
    pos = torch.arange(16).expand(2, -1)

    def run(model, middle, device):
        with torch.no_grad():
            x, p = ids.to(device), pos.to(device)
            return model.decoder(middle(model.encoder(x, p), p), p).cpu()

    torch.testing.assert_close(run(gpu, mid_gpu, gpu.device), run(cpu, mid_cpu, cpu.device), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("choice,dtype", [("bf16", torch.bfloat16), ("bfloat16", torch.bfloat16), ("fp16", torch.float16),
                                          ("float16", torch.float16), ("fp32", torch.float32), (torch.float32, torch.float32)])
def test_a_dtype_choice_is_its_torch_dtype(choice, dtype):
    assert resolve_dtype(choice) is dtype


@pytest.mark.parametrize("choice", ["fp8", "int8", "half", "", torch.int8, torch.float64])
def test_other_dtypes_are_refused(choice):
    with pytest.raises(ConfigError, match="dtype"):
        resolve_dtype(choice)


def test_the_cpu_runs_fp32_and_bf16_and_refuses_fp16():
    cpu = torch.device("cpu")
    check_dtype(cpu, torch.float32)
    check_dtype(cpu, torch.bfloat16)
    with pytest.raises(ConfigError, match="float16 on the CPU is not served"):
        check_dtype(cpu, torch.float16)


@needs_cuda
def test_cuda_runs_fp32_and_fp16_and_bf16_where_it_has_bf16_units():
    cuda = resolve_device("cuda")
    check_dtype(cuda, torch.float32)
    check_dtype(cuda, torch.float16)
    if torch.cuda.is_bf16_supported():
        check_dtype(cuda, torch.bfloat16)
    else:
        with pytest.raises(ConfigError, match="no bf16 support"):
            check_dtype(cuda, torch.bfloat16)
