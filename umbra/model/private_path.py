"""The private local path: the client's decoder also gets the client's own encoder output, locally,
so what is sent to the cloud can be deliberately lossy (issue 17).

    h      = encoder(ids)                                   client
    sent   = Q·(Qᵀh + s·rms(Qᵀh)·z)     (rank r)            what crosses the wire
           =    h  + s·rms(h)·z         (full rank)
    y      = middle(sent)                                   cloud
    logits = decoder(y + W·h)                               client; W learned, zero at the start
    (residual "clean")
    h_c    = encoder(ids) over the CLEAN public table       client only, never sent
    logits = decoder(h_c + g ⊙ (y − sent))                  client; g a learned gate, one at the start

z is keyed, prefix-determined noise (prefix_noise.py: a re-sent prefix gets the same z), s the
configured scale (0: none), Q a fixed orthonormal d×r basis (below), W `local`. With W = 0, no
noise and full rank the model is bit-for-bit the plain split model; STuning then trains W with the
rest of the client, so the decoder can take from h what the lossy message no longer carries and
the cloud adds context on top of it.

Why a fixed random basis and not a learned bottleneck: a learned U·Vᵀ would be trained by the same
loss that pulls the encoder toward the public geometry, and would converge on the directions the
public middle reads best — the attacker's directions too; a fixed basis bounds the channel at r
dimensions whatever the tuning does, leaves the encoder's adaptation as the only moving part (what
the attacks then measure), adds no trained parameter, and is reproducible from the secret. The
cloud can estimate the subspace (PCA of what it receives), so the basis is not a secret that
protects anything by itself; the noise is added inside the subspace, where projecting cannot
remove it. The basis is drawn from the bundle's secret and also stored with the path's weights,
so a bundle loads exactly what it was tuned with.

The clean residual (residual "clean"). With "local", h is the encoder's output over the
INDVocab-randomized table, so the decoder's own copy of the context is as noisy as what is sent,
and W, zero at the start, moves about lr per AdamW step. The clean residual instead gives the
decoder the client's own encoder blocks over the base model's public, un-randomized table — public
information the client may keep — and adds only what the middle did to what was sent, (y − sent),
scaled by a learned gate g. With g = 0 the decoder reads h_c alone: the client-blocks-alone
control; with no noise, full rank and ε = ∞ (clean table = sent table) and g = 1 it is the plain
split model, bit for bit (computed as y + (h_c − sent) + (g − 1) ⊙ (y − sent), whose last two terms
are then exactly zero). What is sent is computed as before, from the INDVocab table only: the clean
table never enters `send`, so the cloud receives the same kind of state (invariant 7). The clean
table is a non-persistent buffer in the client's (private) row order: a state_dict never holds it,
so no saved artefact reveals π through its rows (the bundle stores it in public order,
umbra/privacy/bundle_private_path.py)."""

from __future__ import annotations

import hashlib
import hmac

import numpy as np
import torch
from torch import nn

from umbra.errors import ConfigError
from umbra.model.prefix_noise import NoiseStream, batch_normals, normals
from umbra.model.private_path_config import PrivatePathConfig

NOISE_LABEL = b"umbra/private-path/noise/v1"
BASIS_LABEL = b"umbra/private-path/basis/v1"
SECRET_BYTES = 32


def subkey(secret: bytes, label: bytes) -> bytes:
    """A domain-separated key from the path's secret (HMAC-SHA256 as a PRF)."""
    if len(secret) < 16:
        raise ConfigError("the private path's secret must have at least 16 bytes")
    return hmac.new(secret, label, hashlib.sha256).digest()


def clean_residual(middle_out: torch.Tensor, sent: torch.Tensor, clean: torch.Tensor,
                   gate: torch.Tensor) -> torch.Tensor:
    """The decoder's input h_c + g ⊙ (y − s), computed as y + (h_c − s) + (g − 1) ⊙ (y − s) so that
    h_c = s and g = 1 give y exactly. middle_out y, sent s, clean h_c: [B, T, d]; gate g: [d] or [1]."""
    dtype = middle_out.dtype
    sent, clean = sent.to(dtype), clean.to(dtype)
    return middle_out + (clean - sent) + (gate.to(dtype) - 1) * (middle_out - sent)


def random_basis(secret: bytes, hidden_size: int, rank: int) -> torch.Tensor:
    """[d, r] orthonormal columns, a deterministic function of the secret (QR of keyed normals)."""
    seeds = [hmac.new(subkey(secret, BASIS_LABEL), i.to_bytes(4, "little"), hashlib.sha256).digest()
             for i in range(hidden_size)]
    gauss = normals(seeds, rank)  # [d, r]
    q, r = np.linalg.qr(gauss)
    q = q * np.sign(np.diag(r))[None, :]  # unique: positive diagonal of R
    return torch.from_numpy(np.ascontiguousarray(q)).float()


class PrivatePath(nn.Module):
    """W (`local`, trained) and the fixed basis of one client; the noise key is held in memory only
    (never in state_dict, never on disk)."""

    def __init__(self, config: PrivatePathConfig, hidden_size: int, secret: bytes,
                 basis: torch.Tensor | None = None, clean_table: torch.Tensor | None = None):
        """`clean_table` [V, d]: the base model's public embedding table in the CLIENT's id order
        (rows permuted by π for a bundle); required with residual "clean", refused otherwise."""
        super().__init__()
        config.validate(hidden_size)
        if not config.enabled:
            raise ConfigError("a PrivatePath needs an enabled PrivatePathConfig")
        self.config = config
        self.hidden_size = hidden_size
        if config.clean:
            if clean_table is None or clean_table.dim() != 2 or clean_table.shape[1] != hidden_size:
                raise ConfigError(f"the clean residual needs the public embedding table [V, {hidden_size}]")
            self.local = None
            self.gate = nn.Parameter(torch.ones(hidden_size if config.gate == "channel" else 1))
            self.register_buffer("clean_embed", clean_table.detach().clone(), persistent=False)
        else:
            if clean_table is not None:
                raise ConfigError("only the clean residual holds a clean table")
            self.local = nn.Linear(hidden_size, hidden_size, bias=False)
            nn.init.zeros_(self.local.weight)
            self.gate = self.clean_embed = None
        if config.rank is not None:
            b = random_basis(secret, hidden_size, config.rank) if basis is None else basis.float()
            if tuple(b.shape) != (hidden_size, config.rank):
                raise ConfigError(f"private path basis has shape {tuple(b.shape)}, expected "
                                  f"({hidden_size}, {config.rank})")
            self.register_buffer("basis", b.contiguous())
        else:
            if basis is not None:
                raise ConfigError("a full-rank private path has no basis")
            self.basis = None
        self._noise_key = subkey(secret, NOISE_LABEL)

    @property
    def width(self) -> int:
        """Dimensions the noise lives in (r, or d at full rank)."""
        return self.config.rank or self.hidden_size

    # -- noise ----------------------------------------------------------------------------------
    def noise_for(self, ids: torch.Tensor) -> torch.Tensor | None:
        """[B, T, width] float32 normals for sequences of (private) ids [B, T] that start at
        position 0; None without noise."""
        if self.config.noise <= 0:
            return None
        return torch.from_numpy(batch_normals(self._noise_key, self.width, ids.cpu().numpy())).float()

    def stream(self) -> NoiseStream | None:
        """An incremental noise stream for one session (the engine); None without noise."""
        return NoiseStream(self._noise_key, self.width) if self.config.noise > 0 else None

    # -- the two halves ---------------------------------------------------------------------------
    def send(self, hidden: torch.Tensor, noise: torch.Tensor | None) -> torch.Tensor:
        """What crosses the wire for the encoder output `hidden` [B, T, d] (autograd flows to it);
        `noise` [B, T, width] standard normals (required when the config has noise)."""
        if not self.config.lossy:
            return hidden
        x = hidden.float()
        if self.basis is not None:
            x = x @ self.basis  # [B, T, r]
        if self.config.noise > 0:
            if noise is None or tuple(noise.shape) != tuple(x.shape):
                raise ConfigError(f"the private path needs noise of shape {tuple(x.shape)}")
            rms = x.detach().pow(2).mean(-1, keepdim=True).sqrt()
            x = x + self.config.noise * rms * noise.to(x.device, torch.float32)
        if self.basis is not None:
            x = x @ self.basis.T
        return x.to(hidden.dtype)

    def clean_hidden(self, encoder, ids: torch.Tensor | None, positions: torch.Tensor, cache=None,
                     embeds: torch.Tensor | None = None, adapters=None) -> torch.Tensor | None:
        """h_c [B, T, d]: `encoder`'s blocks over the clean table at ids [B, T] (or over `embeds`
        [B, T, d], soft-prompt positions, which are no table rows), with its own `cache`; None
        without the clean residual. Never sent."""
        if not self.config.clean:
            return None
        if embeds is None:
            embeds = self.clean_embed[ids].to(encoder.embed_tokens.weight.dtype)  # [B, T, d]
        return encoder(None, positions, cache, embeds=embeds, adapters=adapters)

    def decoder_input(self, middle_out: torch.Tensor, hidden: torch.Tensor, *, sent: torch.Tensor | None = None,
                      clean: torch.Tensor | None = None) -> torch.Tensor:
        """The decoder's input at each position: y + W·h ("local"), or h_c + g ⊙ (y − sent)
        ("clean": `sent` what was sent, `clean` = clean_hidden(...)). All [B, T, d]."""
        if self.config.clean:
            if sent is None or clean is None:
                raise ConfigError("the clean residual needs what was sent and the clean encoder output")
            return clean_residual(middle_out, sent, clean, self.gate)
        return middle_out + self.local(hidden.to(self.local.weight.dtype)).to(middle_out.dtype)


def split_logits(encoder, middle, decoder, path: PrivatePath | None, ids: torch.Tensor,
                 positions: torch.Tensor | None = None) -> torch.Tensor:
    """A plain full forward (no caches) of the split model with its private path, middle
    in-process (`middle`: MiddleBlocks or any callable (x, positions) -> x): the reference the
    engine and the utility evaluation agree with. ids [B, T] start at position 0."""
    if positions is None:
        positions = torch.arange(ids.shape[1], device=ids.device).expand(ids.shape[0], -1)
    hidden = encoder(ids, positions)
    if path is None:
        return decoder(middle(hidden, positions), positions)
    sent = path.send(hidden, path.noise_for(ids))
    out = middle(sent, positions)
    clean = path.clean_hidden(encoder, ids, positions)
    return decoder(path.decoder_input(out, hidden, sent=sent, clean=clean), positions)
