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
# what a --dtype option accepts -> the torch dtype
DTYPES = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16,
          "fp32": torch.float32, "float32": torch.float32}


def resolve_device(choice: str | torch.device = "auto") -> torch.device:
    """"auto": the first CUDA device when there is one, else the CPU; "cpu"; "cuda" / "cuda:N"
    (ConfigError when this machine has no such accelerator — never a silent fall back to the CPU).
    A CUDA device comes back with its index ("cuda" is the current device, cuda:0 unless set)."""
    if isinstance(choice, torch.device):
        choice = str(choice)
    if choice == "auto":
        choice = "cuda" if torch.cuda.is_available() else "cpu"
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
        if device.index is None:  # the one it means: logs, metrics and memory queries name it (cuda:0)
            device = torch.device("cuda", torch.cuda.current_device())
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


def resolve_dtype(choice: str | torch.dtype) -> torch.dtype:
    """bf16 | fp16 | fp32 (or their torch names) -> the torch dtype; ConfigError otherwise."""
    if isinstance(choice, torch.dtype):
        if choice not in DTYPES.values():
            raise ConfigError(f"unsupported dtype {choice} (use bf16, fp16 or fp32)")
        return choice
    if choice not in DTYPES:
        raise ConfigError(f"unknown dtype {choice!r} (use bf16, fp16 or fp32)")
    return DTYPES[choice]


def check_dtype(device: torch.device, dtype: torch.dtype) -> None:
    """ConfigError unless `device` runs the blocks' arithmetic in `dtype`: the CPU runs fp32 and
    bf16 (its fp16 is emulated and refused for serving: use bf16), a CUDA device fp32, fp16 and bf16
    where it has bf16 units (compute capability 8.0 up); then a probe of the blocks' operations
    (matmul, softmax, RMS norm, SiLU) in that dtype on the device itself."""
    name = str(dtype).removeprefix("torch.")
    if device.type == "cpu" and dtype == torch.float16:
        raise ConfigError("dtype float16 on the CPU is not served (emulated, no fp16 arithmetic units): "
                          "use bf16 or fp32 there, fp16 on a CUDA device")
    if device.type == "cuda" and dtype == torch.bfloat16 and not torch.cuda.is_bf16_supported():
        raise ConfigError(f"dtype bfloat16 asked for, but {torch.cuda.get_device_name(device)} has no bf16 "
                          f"support: use fp16 or fp32")
    try:
        x = torch.ones(2, 8, dtype=dtype, device=device)
        y = torch.softmax(x @ x.T, dim=-1) @ x
        y = y * torch.rsqrt(y.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(dtype)
        torch.nn.functional.silu(y).sum().item()
    except RuntimeError as exc:
        raise ConfigError(f"device {device} cannot run dtype {name}: {exc}") from exc
