"""A model too large for one process's memory still serves split when each part fits (issue 61,
point 1): the real `umbra complete` and the real cloud service (`umbra cloud serve`), each in a
process of its own under an RLIMIT_DATA that holds its own part but not the whole model, complete exactly as without the limit,
while the whole model under the same limit cannot load (benchmarks/memory_cap.py; the 1.5B run is
in docs/benchmarks.md). The checkpoint is bf16 and both sides compute in fp32, so every weight is
cast into private memory, which the limit counts. Under such a limit (or a memory cgroup's) the
cloud's KV budget is a share of the room the limit leaves, not of the machine's free memory
(umbra/model/memory_plan.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from memory_cap import complete, default_limit, limit_window, part_bytes  # noqa: E402
from synthetic_model import build  # noqa: E402

from umbra.model.memory_plan import cgroup_room  # noqa: E402


# slow: five real processes (client and cloud, twice, and the whole model once), each under its own
# RLIMIT_DATA, which only a process of its own can have; ~40 CPU-s, over 60 s of wall under load
@pytest.mark.slow
def test_each_side_under_a_limit_the_whole_model_exceeds_completes_as_without_it(tmp_path):
    model = build(tmp_path / "m", "small", torch.bfloat16, shard_bytes=1,  # a layer a shard
                  overrides=dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=8,
                                 num_attention_heads=8, vocab_size=4096))
    parts = part_bytes(model)  # fp32, the default split (E=1, D=2): client 122 MiB, middle 163 MiB
    assert min(parts.values()) > 100 * 2**20

    reference = complete(model, tmp_path)
    assert reference.returncode == 0, reference.stderr[-3000:]
    # the larger side's peak private data, and the least a side holding the other's part too would
    # need: the window is wide enough for what a 20 ms sample misses of a peak (a one-layer shard's
    # mapping and one cast tensor: 26 MiB here) on both sides of the limit, at its middle
    low, high = limit_window(reference, parts)
    assert high - low > 64 * 2**20, (low, high)
    limit = default_limit(reference, parts)

    capped = complete(model, tmp_path, limit=limit)
    assert capped.returncode == 0, capped.stderr[-3000:]
    assert capped.cloud_limit == limit  # read from the cloud's /proc/PID/limits while it ran
    assert capped.completion["completion"] == reference.completion["completion"] != ""
    assert capped.completion["generated_tokens"] == reference.completion["generated_tokens"] > 0
    assert capped.completion["round_trips"] > 0  # through the cloud
    budget = float(re.search(r"KV budget ([\d.]+) GiB on cpu \(50% of", capped.cloud_log).group(1)) * 2**30
    assert budget <= (limit - parts["middle"]) / 2 + 0.01 * 2**30  # half the room left beside the blocks

    whole = complete(model, tmp_path, local=True, limit=limit)
    # the client's blocks loaded, the middle did not fit beside them
    assert whole.out_of_memory and "load_middle" in whole.stderr, whole.stderr[-3000:]


ROOM = """
import resource, sys, torch
from umbra.model.memory_plan import free_memory, plan_memory
from umbra.model.spec import load_spec
used = next(int(ln.split()[1]) * 1024 for ln in open("/proc/self/status") if ln.startswith("VmData:"))
resource.setrlimit(resource.RLIMIT_DATA, (used + int(sys.argv[2]), resource.RLIM_INFINITY))
plan = plan_memory(load_spec(sys.argv[1]), 2, torch.float32, torch.device("cpu"), 512)
print(free_memory(torch.device("cpu")), plan.free_bytes, plan.kv_budget_bytes)
"""


def test_the_cpus_free_memory_is_what_this_processs_data_limit_leaves(tiny_model_dirs):
    """Under RLIMIT_DATA the cloud's KV budget is half of the room left under it, not half of the
    machine's MemAvailable (a budget it could not allocate)."""
    room = 256 * 2**20
    out = subprocess.run([sys.executable, "-c", ROOM, str(tiny_model_dirs["qwen2-tied"]), str(room)],
                         capture_output=True, text=True, check=True).stdout
    free, planned, budget = map(int, out.split())
    assert room - 64 * 2**20 < free <= room and room - 64 * 2**20 < planned <= room and budget == planned // 2


def cgroup_tree(tmp_path: Path, membership: str, files: dict[str, str]) -> tuple[Path, Path]:
    """A /proc/self/cgroup and a cgroup mount as the kernel writes them, under tmp_path."""
    for name, text in files.items():
        (tmp_path / "fs" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "fs" / name).write_text(text)
    (tmp_path / "cgroup").write_text(membership)
    return tmp_path / "cgroup", tmp_path / "fs"


def test_a_memory_cgroups_limit_less_its_usage_is_the_room(tmp_path):
    stat = "anon 1000\ninactive_file 300\nactive_file 50\n"
    v2 = cgroup_tree(tmp_path / "v2", "0::/user.slice/umbra.service\n",
                     {"user.slice/umbra.service/memory.max": "4096\n",
                      "user.slice/umbra.service/memory.current": "1500\n", "user.slice/umbra.service/memory.stat": stat})
    assert cgroup_room(*v2) == 4096 - 1500 + 300
    v1 = cgroup_tree(tmp_path / "v1", "5:cpu,cpuacct:/x\n4:memory:/docker/abc\n0::/\n",
                     {"memory/docker/abc/memory.limit_in_bytes": "4096\n",
                      "memory/docker/abc/memory.usage_in_bytes": "1500\n", "memory/docker/abc/memory.stat": stat})
    assert cgroup_room(*v1) == 4096 - 1500 + 300
    top = cgroup_tree(tmp_path / "top", "4:memory:/docker/abc\n",  # no cgroup namespace: the group at the top
                      {"memory/memory.limit_in_bytes": "4096\n", "memory/memory.usage_in_bytes": "1500\n",
                       "memory/memory.stat": stat})
    assert cgroup_room(*top) == 4096 - 1500 + 300
    unlimited = cgroup_tree(tmp_path / "none", "4:memory:/a\n0::/b\n",
                            {"memory/a/memory.limit_in_bytes": "9223372036854771712\n",
                             "memory/a/memory.usage_in_bytes": "1500\n", "memory/a/memory.stat": stat,
                             "b/memory.max": "max\n", "b/memory.current": "1500\n", "b/memory.stat": stat})
    assert cgroup_room(*unlimited) is None
    assert cgroup_room(tmp_path / "no-such-file", tmp_path) is None
