"""The check of umbra/model/device.py's rule on a CPU machine (tests/tuning/test_device_following.py
says how it works): factories without a device land on "meta" while training runs."""

from __future__ import annotations

import functools
from contextlib import contextmanager

import torch


@contextmanager
def factories_on_meta():
    before = torch.get_default_device()
    torch.set_default_device("meta")
    try:
        yield
    finally:
        torch.set_default_device(before)


def on_cpu(f):
    """`f` with its factories on the CPU (what is built there by design)."""
    @functools.wraps(f)
    def built(*args, **kwargs):
        with torch.device("cpu"):
            return f(*args, **kwargs)
    return built
