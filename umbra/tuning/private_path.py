"""Attaching a private local path (umbra/model/private_path.py) to a client before STuning.

    path = attach_private_path(client, config.private_path, secret)   # TuneClient, SimulatedClient,
                                                                      # ClientBundle: sets client.private_path
    await tune(client, middle, data, config)                          # trains W with the rest

`secret` keys the path's noise and basis: for a bundle, `bundle_secret(bundle)`
(umbra/privacy/bundle_private_path.py: derived from π, stable under key rotation); for an
in-memory client (benchmarks, the attack grid), any 32 random bytes (`new_secret()`) — whoever
knows it can regenerate, and so subtract, the noise. A freshly attached path has W = 0: the client
computes exactly what it did without one until tuning moves W (with a lossy send, what is sent
changes at once). The clean residual (`residual="clean"`) also needs the base model's public
embedding table, `public_table`, which the path keeps in the client's row order.

`prepare_for_tuning(client, config, secret)` is what `umbra tune` calls: it keeps a path the
client already has (and the config must then agree with it) or attaches a fresh one."""

from __future__ import annotations

import secrets
from dataclasses import replace

import torch

from umbra.errors import ConfigError
from umbra.model.private_path import SECRET_BYTES, PrivatePath
from umbra.model.private_path_config import PrivatePathConfig
from umbra.privacy.ltokenizer import private_rows
from umbra.tuning.config import TuneConfig


def new_secret() -> bytes:
    """A fresh secret for an in-memory client's path (OS CSPRNG)."""
    return secrets.token_bytes(SECRET_BYTES)


def clean_table_of(client, public_table: torch.Tensor) -> torch.Tensor:
    """The base model's public embedding table [V, d] (PUBLIC row order) in `client`'s id order:
    rows permuted by its π, if it has one; in the encoder's dtype and on its device."""
    weight = client.encoder.embed_tokens.weight
    if tuple(public_table.shape) != tuple(weight.shape):
        raise ConfigError(f"the clean table has shape {tuple(public_table.shape)}, the client's embedding "
                          f"{tuple(weight.shape)}: not this client's base model")
    table = public_table.detach().to(device=weight.device, dtype=weight.dtype)
    perm = getattr(client, "permutation", None)
    return table if perm is None else private_rows(table, perm)


def attach_private_path(client, config: PrivatePathConfig, secret: bytes,
                        public_table: torch.Tensor | None = None) -> PrivatePath:
    """A fresh path (W = 0, or g = 1 for the clean residual) on `client` (anything with `encoder`,
    `decoder`; the attribute `private_path` is set); returns it. `public_table`: the base model's
    embedding table in public row order, required by the clean residual (which keeps it, permuted
    to the client's ids). ConfigError if the config is off or the client has one."""
    if getattr(client, "private_path", None) is not None:
        raise ConfigError("the client already has a private path")
    clean = None
    if config.clean:
        if public_table is None:
            raise ConfigError("the clean residual needs the base model's public embedding table")
        clean = clean_table_of(client, public_table)
    path = PrivatePath(config, client.encoder.spec.hidden_size, secret, clean_table=clean)
    path.to(device=client.encoder.embed_tokens.weight.device)
    client.private_path = path
    return path


def prepare_for_tuning(client, config: TuneConfig, secret: bytes | None,
                       public_table: torch.Tensor | None = None) -> TuneConfig:
    """The config to tune `client` with: a path the client has is kept (its settings win when the
    config leaves the path off; a different enabled setting is a ConfigError — retune from a fresh
    bundle to change it); an enabled config without one attaches a fresh path keyed by `secret`
    (with `public_table` for the clean residual)."""
    have = getattr(client, "private_path", None)
    want = config.private_path.validate(client.encoder.spec.hidden_size)
    if have is not None:
        if want.enabled and want != have.config:
            raise ConfigError(f"the client's private path is {have.config}; tuning asked for {want} "
                              "(the path cannot be changed in place)")
        return replace(config, private_path=have.config)
    if want.enabled:
        if secret is None:
            raise ConfigError("a private path needs its secret")
        attach_private_path(client, want, secret, public_table)
    return config
