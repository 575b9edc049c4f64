"""How much KV cache a serving process can hold, computed from its device's free memory.

The cloud sizes its session budget (sessions x cached positions) and its decode slab width from
the memory left once the middle blocks are loaded: free device memory on an accelerator
(torch.cuda.mem_get_info), on the CPU the kernel's MemAvailable or less where this process is
limited (its RLIMIT_DATA, its memory cgroup). An explicit budget overrides the
computed one; the plan is reported at start and in the metrics (server/app.py)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from umbra.errors import ConfigError
from umbra.model.spec import ModelSpec


def free_memory(device: torch.device) -> int:
    """Bytes a new allocation on `device` can use now: free CUDA memory; on the CPU the least of
    the kernel's MemAvailable, the room under this process's RLIMIT_DATA and the room under its
    memory cgroup's limit (a container's MemAvailable is the host's)."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    room = [x for x in (_mem_available(), _data_limit_room(), cgroup_room()) if x is not None]
    return max(0, min(room))


def _proc_kib(path: str, field: str) -> int | None:
    """A "Field:   N kB" line of a /proc file, in bytes."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _mem_available() -> int:
    available = _proc_kib("/proc/meminfo", "MemAvailable")
    if available is not None:
        return available
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def _data_limit_room() -> int | None:
    """RLIMIT_DATA's soft limit less the private data already mapped (VmData: what the kernel
    compares with it); None when unlimited."""
    try:
        import resource  # POSIX only
    except ImportError:
        return None
    soft = resource.getrlimit(resource.RLIMIT_DATA)[0]
    used = _proc_kib("/proc/self/status", "VmData")
    return None if soft == resource.RLIM_INFINITY or used is None else soft - used


def cgroup_room(membership: Path = Path("/proc/self/cgroup"), root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """The memory cgroup's limit less its usage, the inactive page cache counted as free (the
    kernel reclaims it first); None without a limit or a readable cgroup. `membership`: the
    process's /proc/PID/cgroup; `root`: where the hierarchies are mounted. cgroup v2 (memory.max)
    or v1 (memory.limit_in_bytes); the process's own group, else the mount's top (a container
    without a cgroup namespace sees its group there)."""
    try:
        lines = membership.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        _, controllers, path = fields
        if controllers == "":  # v2
            top, names = root, ("memory.max", "memory.current")
        elif "memory" in controllers.split(","):  # v1
            top, names = root / "memory", ("memory.limit_in_bytes", "memory.usage_in_bytes")
        else:
            continue
        for d in dict.fromkeys((top / path.lstrip("/"), top)):
            try:
                cap, used = (d / names[0]).read_text().strip(), int((d / names[1]).read_text())
                inactive = next((int(ln.split()[1]) for ln in (d / "memory.stat").read_text().splitlines()
                                 if ln.startswith("inactive_file ")), 0)
            except (OSError, ValueError):
                continue
            if cap != "max" and int(cap) < 2**62:  # v1 writes "no limit" as a page-rounded 2**63 - 1
                return int(cap) - used + inactive
            break  # the process's own group has no limit
    return None


def kv_bytes_per_position(spec: ModelSpec, layers: int, dtype: torch.dtype) -> int:
    """Keys and values of one cached position across `layers` blocks."""
    return 2 * layers * spec.num_kv_heads * spec.head_dim * torch.empty((), dtype=dtype).element_size()


@dataclass(frozen=True)
class MemoryPlan:
    device: str  # where the KV caches live ("cpu", "cuda:0")
    free_bytes: int  # free memory measured once the blocks were loaded
    kv_budget_bytes: int  # all sessions' KV caches together
    computed: bool  # the budget came from free_bytes (False: set explicitly)
    bytes_per_position: int  # one cached position of every middle block
    positions: int  # cached positions the budget holds (sessions x positions)
    sessions_at_full_context: int  # sessions of max_seq_len positions the budget holds
    decode_width: int  # most rows of one batched decode slab

    def describe(self) -> str:
        source = f"{self.kv_memory_share():.0%} of {self.free_bytes / 2**30:.2f} GiB free" if self.computed \
            else "set explicitly"
        return (f"KV budget {self.kv_budget_bytes / 2**30:.2f} GiB on {self.device} ({source}): "
                f"{self.positions} cached positions of {self.bytes_per_position} B, "
                f"{self.sessions_at_full_context} sessions at full context; decode slabs up to {self.decode_width} rows")

    def kv_memory_share(self) -> float:
        return self.kv_budget_bytes / self.free_bytes if self.free_bytes else 0.0


def plan_memory(spec: ModelSpec, layers: int, dtype: torch.dtype, device: torch.device, max_seq_len: int, *,
                fraction: float = 0.5, budget_bytes: int | None = None, max_width: int = 64,
                min_width: int = 1, free_bytes: int | None = None) -> MemoryPlan:
    """The budget: `budget_bytes`, or `fraction` of the free memory (the rest stays for activations,
    the decode slabs' gathered keys and the process's other allocations). The decode width: the
    largest power of two from `min_width` up to `max_width` whose rows all fit the budget at
    full context (never below `min_width`, unless `max_width` is smaller). ConfigError when the budget cannot hold one session
    of one position."""
    if not 0 < fraction <= 1:
        raise ConfigError(f"the KV memory fraction must lie in (0, 1], got {fraction}")
    free = free_memory(device) if free_bytes is None else free_bytes
    budget = budget_bytes if budget_bytes is not None else int(free * fraction)
    per_position = kv_bytes_per_position(spec, layers, dtype)
    positions = budget // per_position
    if positions < 1:
        raise ConfigError(f"{free / 2**20:.0f} MiB free on {device}: a KV budget of {budget} B holds no cached "
                          f"position ({per_position} B each); free memory or set kv_budget_bytes")
    sessions = positions // max(1, max_seq_len)
    width = min(min_width, max_width)
    while width * 2 <= max_width and width * 2 <= sessions:
        width *= 2
    return MemoryPlan(str(device), free, budget, budget_bytes is None, per_position, positions, sessions, width)
