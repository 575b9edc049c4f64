"""Where a run's tensors live: the device asked for, resolved once, and the device a module is on.

Everything else follows its inputs: a function that creates a tensor takes the device of a tensor
it already has; numpy data and the CSPRNG's draws are made on the CPU and moved at the boundary
where they meet the model. So a CPU run performs exactly the operations it always did, and a CUDA
run the same ones on the accelerator (its numbers differ in the last bits: another kernel library)."""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import nn

from umbra.errors import ConfigError

CHOICES = ("auto", "cpu", "cuda")  # what a --device option accepts ("cuda:N" too)


def resolve_device(choice: str | torch.device = "auto") -> torch.device:
    """"auto": the first CUDA device when there is one, else the CPU; "cpu"; "cuda" / "cuda:N"
    (ConfigError when this machine has no such accelerator — never a silent fall back to the CPU)."""
    if isinstance(choice, torch.device):
        choice = str(choice)
    if choice == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(choice)
    except RuntimeError as exc:
        raise ConfigError(f"unknown device {choice!r} (use one of: {', '.join(CHOICES)}, cuda:N)") from exc
    if device.type not in ("cpu", "cuda"):
        raise ConfigError(f"unsupported device {choice!r} (use one of: {', '.join(CHOICES)}, cuda:N)")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device {choice!r} asked for, but this machine has no CUDA accelerator "
                              f"(or this torch build has no CUDA)")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(f"device {choice!r} asked for, but this machine has {torch.cuda.device_count()} "
                              f"CUDA device(s)")
    return device


def device_of(module: nn.Module) -> torch.device:
    """The device of a module's first parameter (or buffer); the CPU for a module without either."""
    for t in module.parameters():
        return t.device
    for t in module.buffers():
        return t.device
    return torch.device("cpu")


@contextmanager
def placed(device: torch.device | None, *modules: nn.Module | None):
    """The modules (None entries skipped) moved to `device` in place for the duration, then each
    back where it was (exact: a move copies values). `device` None: nothing moves."""
    present = [m for m in modules if m is not None]
    homes = [device_of(m) for m in present]
    if device is not None:
        for m in present:
            m.to(device)
    try:
        yield
    finally:
        if device is not None:
            for m, home in zip(present, homes):
                m.to(home)
