"""Attaching a private local path (umbra/model/private_path.py) to a client before STuning.

    path = attach_private_path(client, config.private_path, secret)   # TuneClient, SimulatedClient,
                                                                      # ClientBundle: sets client.private_path
    await tune(client, middle, data, config)                          # trains W with the rest

`secret` keys the path's noise and basis: for a bundle, `bundle_secret(bundle)`
(umbra/privacy/bundle_private_path.py: derived from π, stable under key rotation); for an
in-memory client (benchmarks, the attack grid), any 32 random bytes (`new_secret()`) — whoever
knows it can regenerate, and so subtract, the noise. A freshly attached path has W = 0: the client
computes exactly what it did without one until tuning moves W (with a lossy send, what is sent
changes at once).

`prepare_for_tuning(client, config, secret)` is what `umbra tune` calls: it keeps a path the
client already has (and the config must then agree with it) or attaches a fresh one."""

from __future__ import annotations

import secrets
from dataclasses import replace

from umbra.errors import ConfigError
from umbra.model.private_path import SECRET_BYTES, PrivatePath
from umbra.model.private_path_config import PrivatePathConfig
from umbra.tuning.config import TuneConfig


def new_secret() -> bytes:
    """A fresh secret for an in-memory client's path (OS CSPRNG)."""
    return secrets.token_bytes(SECRET_BYTES)


def attach_private_path(client, config: PrivatePathConfig, secret: bytes) -> PrivatePath:
    """A fresh path (W = 0) on `client` (anything with `encoder`, `decoder`; the attribute
    `private_path` is set); returns it. ConfigError if the config is off or the client has one."""
    if getattr(client, "private_path", None) is not None:
        raise ConfigError("the client already has a private path")
    path = PrivatePath(config, client.encoder.spec.hidden_size, secret)
    path.to(device=client.encoder.embed_tokens.weight.device)
    client.private_path = path
    return path


def prepare_for_tuning(client, config: TuneConfig, secret: bytes | None) -> TuneConfig:
    """The config to tune `client` with: a path the client has is kept (its settings win when the
    config leaves the path off; a different enabled setting is a ConfigError — retune from a fresh
    bundle to change it); an enabled config without one attaches a fresh path keyed by `secret`."""
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
        attach_private_path(client, want, secret)
    return config
