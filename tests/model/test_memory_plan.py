"""umbra/model/memory_plan.py: the cloud's KV budget is a share of its device's free memory (or the
budget set), counted in cached positions of the middle blocks and in sessions at full context;
the decode width is the widest power of two the budget's full-context sessions fill."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from umbra.errors import ConfigError
from umbra.model.memory_plan import free_memory, kv_bytes_per_position, plan_memory
from umbra.model.spec import load_spec

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA accelerator")
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def spec(tiny_model_dirs):
    return load_spec(tiny_model_dirs["qwen2-tied"])  # 2 KV heads of 16


def test_a_position_is_every_layers_keys_and_values(spec):
    assert kv_bytes_per_position(spec, 3, torch.float32) == 2 * 3 * 2 * 16 * 4
    assert kv_bytes_per_position(spec, 3, torch.bfloat16) == 2 * 3 * 2 * 16 * 2


def test_the_budget_is_a_share_of_the_free_memory(spec):
    per = kv_bytes_per_position(spec, 3, torch.float32)
    plan = plan_memory(spec, 3, torch.float32, CPU, max_seq_len=512, free_bytes=100 * per * 512 * 2)
    assert plan.computed and plan.kv_budget_bytes == 100 * per * 512
    assert plan.positions == 100 * 512 and plan.sessions_at_full_context == 100
    assert plan.decode_width == 64  # 100 full-context sessions fill 64 rows, not 128
    assert "50% of" in plan.describe() and "100 sessions at full context" in plan.describe()


def test_an_explicit_budget_wins_and_a_small_one_narrows_the_slabs(spec):
    per = kv_bytes_per_position(spec, 3, torch.float32)
    plan = plan_memory(spec, 3, torch.float32, CPU, 512, budget_bytes=5 * 512 * per, free_bytes=10**12,
                       max_width=64, min_width=1)
    assert not plan.computed and plan.sessions_at_full_context == 5 and plan.decode_width == 4
    assert plan_memory(spec, 3, torch.float32, CPU, 512, budget_bytes=per, min_width=16).decode_width == 16
    assert plan_memory(spec, 3, torch.float32, CPU, 512, budget_bytes=per, min_width=16, max_width=8).decode_width == 8


def test_a_budget_without_room_for_one_position_is_refused(spec):
    with pytest.raises(ConfigError, match="holds no cached position"):
        plan_memory(spec, 3, torch.float32, CPU, 512, free_bytes=100)
    with pytest.raises(ConfigError, match="fraction"):
        plan_memory(spec, 3, torch.float32, CPU, 512, fraction=0)


def test_the_cpus_free_memory_is_the_kernels_available_memory():
    available = next(int(line.split()[1]) * 1024 for line in Path("/proc/meminfo").read_text().splitlines()
                     if line.startswith("MemAvailable:"))
    assert 0 < free_memory(CPU) and abs(free_memory(CPU) - available) < available / 2  # it moves while we read


@needs_cuda
def test_cudas_free_memory_is_what_the_driver_reports():
    cuda = torch.device("cuda")
    free, total = torch.cuda.mem_get_info(cuda)
    assert 0 < free_memory(cuda) <= total
