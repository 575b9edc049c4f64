"""The private local path: the client's decoder also gets the client's own encoder output, locally,
so what is sent to the cloud can be deliberately lossy (issue 17).

    h      = encoder(ids)                                   client
    sent   = Q·(Qᵀh + s·rms(Qᵀh)·z)     (rank r)            what crosses the wire
           =    h  + s·rms(h)·z         (full rank)
    y      = middle(sent)                                   cloud
    logits = decoder(y + W·h)                               client; W learned, zero at the start

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
so a bundle loads exactly what it was tuned with."""

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
                 basis: torch.Tensor | None = None):
        super().__init__()
        config.validate(hidden_size)
        if not config.enabled:
            raise ConfigError("a PrivatePath needs an enabled PrivatePathConfig")
        self.config = config
        self.hidden_size = hidden_size
        self.local = nn.Linear(hidden_size, hidden_size, bias=False)
        nn.init.zeros_(self.local.weight)
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

    def decoder_input(self, middle_out: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """y + W·h: the decoder's input at each position."""
        return middle_out + self.local(hidden.to(self.local.weight.dtype)).to(middle_out.dtype)


def split_logits(encoder, middle, decoder, path: PrivatePath | None, ids: torch.Tensor,
                 positions: torch.Tensor | None = None) -> torch.Tensor:
    """A plain full forward (no caches) of the split model with its private path, middle
    in-process (`middle`: MiddleBlocks or any callable (x, positions) -> x): the reference the
    engine and the utility evaluation agree with. ids [B, T] start at position 0."""
    if positions is None:
        positions = torch.arange(ids.shape[1]).expand(ids.shape[0], -1)
    hidden = encoder(ids, positions)
    if path is None:
        return decoder(middle(hidden, positions), positions)
    out = middle(path.send(hidden, path.noise_for(ids)), positions)
    return decoder(path.decoder_input(out, hidden), positions)
