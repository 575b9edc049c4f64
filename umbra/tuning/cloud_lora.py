"""Client side of the cloud's per-client LoRA (umbra/middle/lora_store.py): ask the cloud to create, train,
freeze or drop *this client's* adapter on the middle blocks, over its /v1/lora routes.

The adapter is the cloud's (NOIR: the cloud updates the middle's LoRA, the client its encoder
and decoder); it is trained from the same hidden states and output gradients the cloud already
sees in STuning, so it reveals nothing new to the cloud, and the cloud applies it only to this
client's sessions (its bearer-token identity). Nothing here is sent but the settings below."""

from __future__ import annotations

import ssl
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from umbra.errors import CloudRejected, CloudUnavailable


@dataclass(frozen=True)
class CloudLoraConfig:
    rank: int = 8  # LoRA rank on every Linear of the middle blocks
    alpha: float = 16.0  # scale = alpha / rank
    lr: float = 1e-3  # the cloud's AdamW learning rate for the adapter (constant)
    seed: int | None = None  # init of the adapter's A matrices (None: the cloud's entropy)


class CloudLora:
    def __init__(self, base_url: str, token: str, verify: str | Path | None = None, timeout: float = 60.0):
        context = ssl.create_default_context(cafile=str(verify)) if verify else True
        self._http = httpx.AsyncClient(base_url=base_url.rstrip("/"), verify=context, timeout=timeout,
                                       headers={"Authorization": f"Bearer {token}"})

    async def _call(self, method: str, path: str, body: dict | None = None) -> dict:
        try:
            r = await self._http.request(method, "/v1/lora" + path, json=body)
        except httpx.TransportError as exc:
            raise CloudUnavailable(f"cloud unreachable: {type(exc).__name__} {exc}") from exc
        if r.status_code >= 400:
            try:
                detail = r.json()["detail"]
            except (ValueError, KeyError, TypeError):
                detail = r.text[:200]
            raise CloudRejected(f"cloud rejected the LoRA request (HTTP {r.status_code}): {detail}", r.status_code)
        return r.json() if r.content else {}

    async def configure(self, config: CloudLoraConfig) -> dict:
        """A fresh adapter (replacing this client's old one), updated by its training sessions."""
        return await self._call("PUT", "", asdict(config))

    async def set_training(self, train: bool) -> dict:
        return await self._call("POST", "/train", {"train": train})

    async def info(self) -> dict:
        return await self._call("GET", "")

    async def delete(self) -> None:
        await self._call("DELETE", "")

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "CloudLora":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()
