"""The cloud a client server completes through — always the real network path (DESIGN §2).

    link = await open_cloud(options, model, stack)    # CloudLink: url, token, certificate
    middle = link.middle(model)                       # RemoteMiddle; the caller acloses it
    await reachable(link)                             # GET /healthz, for recovery after an outage

`cloud.url` null: the real cloud service is started on 127.0.0.1 for the server's lifetime
(`server.launch.local_cloud_sync`, entered on `stack`: closing the stack stops it), exactly as
`umbra complete` does with no cloud configured. Otherwise the configured URL, with its bearer
token from the OS keyring entry `cloud-token:<url>` of `model.keyringService`, or else from the
environment variable named by `cloud.tokenEnv`. Never from settings or argv."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from keys.cloud_tokens import find_cloud_token
from keys.errors import KeyStoreError
from lsp.options import InitializationOptions
from server.launch import LocalCloud, local_cloud_sync
from umbra.engine import ClientModel
from umbra.errors import ConfigError
from umbra.middle.remote import RemoteMiddle

PROBE_TIMEOUT_S = 5.0


@dataclass
class CloudLink:
    url: str
    token: str = field(repr=False)
    verify: Path | None = None  # certificate to trust (https with a private CA / self-signed)
    local: LocalCloud | None = field(default=None, repr=False)  # the self-started service, if any

    def describe(self) -> str:
        return f"{'a self-started cloud' if self.local else 'the cloud'} at {self.url}"

    def exit_status(self) -> int | None:
        """The self-started service's exit status once it has died; None while it runs (or if remote)."""
        return None if self.local is None else self.local.process.poll()

    def middle(self, model: ClientModel) -> RemoteMiddle:
        """A RemoteMiddle for `model`'s split (its connect checks the cloud runs those blocks)."""
        return RemoteMiddle(self.url, self.token, hidden_size=model.spec.hidden_size, verify=self.verify,
                            layers=model.plan.middle_range(model.spec.num_layers))


def cloud_token(options: InitializationOptions) -> str:
    """The bearer token for `options.cloud.url`: keyring first, then the environment (blocking I/O)."""
    try:
        return find_cloud_token(options.cloud.url, options.model.keyring_service, options.cloud.token_env)
    except KeyStoreError as exc:
        raise ConfigError(str(exc)) from exc


def _start_local(model: ClientModel, threads: int | None, stack: contextlib.ExitStack) -> CloudLink:
    settings = {} if threads is None else {"torch_threads": threads}
    cloud = stack.enter_context(local_cloud_sync(model.check_base(), model.plan, settings=settings))
    return CloudLink(cloud.base_url, cloud.token, cloud.verify, cloud)


async def open_cloud(options: InitializationOptions, model: ClientModel, stack: contextlib.ExitStack) -> CloudLink:
    """The configured cloud, or a freshly started one on loopback (bound to `stack`)."""
    if options.cloud.url is None:
        return await asyncio.to_thread(_start_local, model, options.threads, stack)
    token = await asyncio.to_thread(cloud_token, options)
    cert = Path(options.cloud.certificate) if options.cloud.certificate else None
    if cert is not None and not cert.is_file():
        raise ConfigError(f"cloud.certificate {cert} is not a file")
    return CloudLink(options.cloud.url.rstrip("/"), token, cert)


async def reachable(link: CloudLink, timeout: float = PROBE_TIMEOUT_S) -> bool:
    """True if the cloud answers GET /healthz (no credentials, no payload)."""
    verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=str(link.verify)) if link.verify else True
    async with httpx.AsyncClient(verify=verify, timeout=timeout) as client:
        try:
            return (await client.get(link.url + "/healthz")).status_code == 200
        except httpx.HTTPError:
            return False
