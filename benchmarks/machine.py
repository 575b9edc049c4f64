"""What the benchmarks need to know about, and may ask of, the machine they run on.

`cpu_latency(us)` holds a Linux PM QoS request on /dev/cpu_dma_latency for as long as its context
lasts: no CPU enters an idle state whose exit latency exceeds `us` microseconds. With 0, an idle
CPU polls instead of halting. This is what tuned's `latency-performance` profile does for a
latency-bound server; the kernel drops the request when the file is closed, so nothing outlives
the run. It needs write access to the device (root). Every variant of a run is measured under the
same request, the monolithic baseline included.

`describe(us)` is one line on the machine: CPUs, the hypervisor, the guest's idle driver, the
idle-related kernel parameters and the latency request held (`us`), printed at the head of a
benchmark's report so a table says what it was measured on."""

from __future__ import annotations

import contextlib
import os
import platform
import struct
from collections.abc import Iterator
from pathlib import Path

_DEVICE = Path("/dev/cpu_dma_latency")
_IDLE_PARAMS = ("idle=", "haltpoll", "cpuidle", "nested_pvm", "sched_vcpu_pack", "nohz", "isolcpus")


class MachineError(RuntimeError):
    """The machine cannot do what the benchmark was asked to set up."""


@contextlib.contextmanager
def cpu_latency(us: int | None) -> Iterator[None]:
    """Hold a PM QoS CPU-latency request of `us` microseconds (None: no request, a no-op)."""
    if us is None:
        yield
        return
    if us < 0:
        raise MachineError(f"a CPU latency bound must be >= 0 µs, got {us}")
    try:
        fd = os.open(_DEVICE, os.O_WRONLY)
    except OSError as exc:
        raise MachineError(f"cannot hold a CPU latency request: {_DEVICE}: {exc.strerror} "
                           "(Linux only; needs root)") from exc
    try:
        os.write(fd, struct.pack("i", us))
        yield
    finally:
        os.close(fd)


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def describe(latency_us: int | None = None) -> str:
    """One line: CPU count and model, hypervisor, idle driver, idle-related boot parameters, and
    the PM QoS request the run holds (`latency_us`, as given to cpu_latency)."""
    model = next((line.split(":", 1)[1].strip() for line in _read("/proc/cpuinfo").splitlines()
                  if line.startswith("model name")), platform.processor() or "unknown CPU")
    hypervisor = "hypervisor" in _read("/proc/cpuinfo")
    idle = _read("/sys/devices/system/cpu/cpuidle/current_driver") or "none"
    params = [p for p in _read("/proc/cmdline").split() if p.startswith(_IDLE_PARAMS)]
    parts = [f"{os.cpu_count()} × {model}", "virtual machine" if hypervisor else "bare metal",
             f"idle driver {idle}"]
    if params:
        parts.append("boot " + " ".join(params))
    parts.append("PM QoS CPU latency request: " + ("none" if latency_us is None else f"{latency_us} µs held for the run"))
    return "; ".join(parts)
