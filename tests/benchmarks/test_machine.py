"""benchmarks/machine.py: the PM QoS request is held exactly while its context lasts, and refused
clearly where it cannot be."""

import os
import struct
from pathlib import Path

import pytest

from machine import MachineError, cpu_latency, describe

DEVICE = Path("/dev/cpu_dma_latency")


def current_bound() -> int:
    """The kernel's aggregate of all CPU latency requests now held, in µs."""
    fd = os.open(DEVICE, os.O_RDONLY)
    try:
        return struct.unpack("i", os.read(fd, 4))[0]
    finally:
        os.close(fd)


def test_no_request_is_a_no_op():
    with cpu_latency(None):
        pass


def test_negative_bound_is_refused():
    with pytest.raises(MachineError, match=">= 0"):
        with cpu_latency(-1):
            pass


def test_request_held_while_the_context_lasts():
    if not os.access(DEVICE, os.W_OK):  # not root, or not Linux: the refusal must say why
        with pytest.raises(MachineError, match="cannot hold a CPU latency request"):
            with cpu_latency(0):
                pass
        return
    before = current_bound()
    with cpu_latency(7):
        assert current_bound() == min(before, 7)
        with cpu_latency(0):
            assert current_bound() == 0
        assert current_bound() == min(before, 7)
    assert current_bound() == before


def test_describe_names_the_cpus():
    line = describe()
    assert line.startswith(f"{os.cpu_count()} × ")
    assert "idle driver" in line
    assert line.endswith("PM QoS CPU latency request: none")
    assert describe(0).endswith("PM QoS CPU latency request: 0 µs held for the run")
