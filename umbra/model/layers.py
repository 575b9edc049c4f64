"""One Llama-family transformer block as small modules; parameter names mirror Hugging Face's
so that checkpoint keys load without renaming (`self_attn.q_proj.weight`, ...).

Adapters are an argument, never state: `lay` (umbra/model/adapters/selection.py) is what this
block applies for the request being run — LoRA deltas on its projections, bottleneck residuals
on its sublayers' outputs, gated prompt attention — or None for the plain block."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from umbra.model.adapters.selection import LayerAdapters
from umbra.model.kvcache import KVCache
from umbra.model.rope import apply_rope
from umbra.model.spec import ModelSpec


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(dtype)


def attention_mask(
    start: int,
    t: int,
    window: int | None,
    key_padding: torch.Tensor | None = None,
    device: torch.device | None = None,
) -> torch.Tensor | None:
    """Boolean mask [B|1, 1, T, start+T] (True = may attend) for T queries at slots
    start..start+T-1 over all cached keys.

    None means no mask is needed: either one query that sees every key (plain decode), or a
    causal square (start == 0), which SDPA's `is_causal` handles. Its causal flag aligns the
    triangle top-left, so it is never used when queries follow cached keys (start > 0).
    key_padding [B, start+T] marks real tokens (True) vs padding (False)."""
    s = start + t
    if key_padding is None and (window is None or s <= window) and (t == 1 or start == 0):
        return None
    q = torch.arange(start, s, device=device)[:, None]  # [T,1]
    k = torch.arange(s, device=device)[None, :]  # [1,S]
    allowed = k <= q
    if window is not None:
        allowed &= (q - k) < window
    allowed = allowed[None, None]  # [1,1,T,S]
    if key_padding is not None:
        allowed = allowed & key_padding[:, None, None, :].bool()
        allowed = allowed | (k == q)[None, None]  # a padded query still sees itself: no NaN rows
    return allowed


class Attention(nn.Module):
    def __init__(self, spec: ModelSpec, window: int | None):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = spec.num_heads, spec.num_kv_heads, spec.head_dim
        self.window = window
        # GQA: query head h reads kv head h // (H / KV), inside SDPA (no [B,H,S,hd] copy of the cache)
        self.gqa = spec.num_heads != spec.num_kv_heads
        c = spec.hidden_size
        self.q_proj = nn.Linear(c, spec.num_heads * spec.head_dim, bias=spec.qkv_bias)
        self.k_proj = nn.Linear(c, spec.kv_dim, bias=spec.qkv_bias)
        self.v_proj = nn.Linear(c, spec.kv_dim, bias=spec.qkv_bias)
        self.o_proj = nn.Linear(spec.num_heads * spec.head_dim, c, bias=spec.o_bias)

    def forward(
        self,
        x: torch.Tensor,  # [B,T,C]
        cos: torch.Tensor,  # [B,T,hd]
        sin: torch.Tensor,
        mask: torch.Tensor | None,  # [B|1,1,T,S] bool or None
        cache: KVCache | None,
        layer: int,  # index of this block within `cache`
        start: int,  # slots already cached
        lay: LayerAdapters | None = None,
    ) -> torch.Tensor:
        b, t, _ = x.shape
        if lay is not None and lay.merge:
            q, k, v = lay.linear("q_proj", self.q_proj, x), lay.linear("k_proj", self.k_proj, x), \
                lay.linear("v_proj", self.v_proj, x)
        else:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
            if lay is not None:
                u = lay.low_rank("qkv", x)
                q, k, v = lay.add("q_proj", u, q), lay.add("k_proj", u, k), lay.add("v_proj", u, v)
        q = q.view(b, t, self.num_heads, self.head_dim).transpose(1, 2)  # [B,H,T,hd]
        k = k.view(b, t, self.num_kv_heads, self.head_dim).transpose(1, 2)  # [B,KV,T,hd]
        v = v.view(b, t, self.num_kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache is not None:
            k, v = cache.write(layer, start, k, v)  # [B,KV,S,hd]
        if mask is None and t > 1:  # causal square, see attention_mask()
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.gqa)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=self.gqa)
        if lay is not None:
            for prompt, gate in lay.prompts:
                y = y + self._prompt_attention(q, prompt, gate)
        y = y.transpose(1, 2).reshape(b, t, -1)  # [B,T,H*hd]
        if lay is None:
            return self.o_proj(y)
        return lay.linear("o_proj", self.o_proj, y) if lay.merge else lay.project("o_proj", y, self.o_proj(y))

    def _prompt_attention(self, q: torch.Tensor, prompt: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        """A deep prompt's share [B,H,T,hd]: every query attends to the prompt's n keys (the block's
        own projections of P [n,C], no rotary) in a softmax of their own, scaled by tanh(gate) [H]."""
        b, n = q.shape[0], prompt.shape[0]
        pk = self.k_proj(prompt).view(1, n, self.num_kv_heads, self.head_dim).transpose(1, 2).expand(b, -1, -1, -1)
        pv = self.v_proj(prompt).view(1, n, self.num_kv_heads, self.head_dim).transpose(1, 2).expand(b, -1, -1, -1)
        yp = F.scaled_dot_product_attention(q, pk, pv, enable_gqa=self.gqa)
        return torch.tanh(gate).to(yp.dtype).view(1, -1, 1, 1) * yp


class MLP(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        c, f = spec.hidden_size, spec.intermediate_size
        self.gate_proj = nn.Linear(c, f, bias=spec.mlp_bias)
        self.up_proj = nn.Linear(c, f, bias=spec.mlp_bias)
        self.down_proj = nn.Linear(f, c, bias=spec.mlp_bias)

    def forward(self, x: torch.Tensor, lay: LayerAdapters | None = None) -> torch.Tensor:
        if lay is None:
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        if lay.merge:
            h = F.silu(lay.linear("gate_proj", self.gate_proj, x)) * lay.linear("up_proj", self.up_proj, x)
            return lay.linear("down_proj", self.down_proj, h)
        u = lay.low_rank("gate_up", x)
        h = F.silu(lay.add("gate_proj", u, self.gate_proj(x))) * lay.add("up_proj", u, self.up_proj(x))
        return lay.project("down_proj", h, self.down_proj(h))


class Block(nn.Module):
    def __init__(self, spec: ModelSpec, layer_idx: int):
        super().__init__()
        self.layer_idx = layer_idx  # global index in the full model
        self.window = spec.sliding_windows[layer_idx] if spec.sliding_windows else None
        self.input_layernorm = RMSNorm(spec.hidden_size, spec.rms_norm_eps)
        self.self_attn = Attention(spec, self.window)
        self.post_attention_layernorm = RMSNorm(spec.hidden_size, spec.rms_norm_eps)
        self.mlp = MLP(spec)

    def forward(self, x, cos, sin, mask, cache, layer, start, lay: LayerAdapters | None = None):
        if lay is None:
            x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, cache, layer, start)
            return x + self.mlp(self.post_attention_layernorm(x))
        x = x + lay.residual("attention", self.self_attn(self.input_layernorm(x), cos, sin, mask, cache, layer,
                                                         start, lay))
        return x + lay.residual("mlp", self.mlp(self.post_attention_layernorm(x), lay))
