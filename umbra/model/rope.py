"""Rotary position embedding as pure functions (shapes in comments)."""

from __future__ import annotations

import torch


def rope_cos_sin(
    inv_freq: torch.Tensor, positions: torch.Tensor, scaling: float, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """positions [B,T] (int) -> cos, sin [B,T,head_dim], computed in fp32 then cast."""
    freqs = positions[..., None].float() * inv_freq.to(positions.device)  # [B,T,hd/2]
    emb = torch.cat((freqs, freqs), dim=-1)  # [B,T,hd]
    return (emb.cos() * scaling).to(dtype), (emb.sin() * scaling).to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B,H,T,hd], cos/sin [B,T,hd] -> rotated x [B,H,T,hd]."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # [B,1,T,hd]
    return x * cos + rotate_half(x) * sin
