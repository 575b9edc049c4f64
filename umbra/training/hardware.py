"""What the training machine's CPU can do, for defaults that depend on it."""

from __future__ import annotations

from pathlib import Path


def native_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AVX512-BF16 or AMX); without it autocast
    falls back to a scalar kernel that is ~50x slower than fp32 (measured on an AVX2 EPYC)."""
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return True  # cannot tell (not Linux): trust the setting
    return "avx512_bf16" in flags or "amx_bf16" in flags
