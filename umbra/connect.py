"""One way to get a Middle: the client's end of the split for `umbra complete`, `umbra tune`,
`umbra lsp` and `umbra serve` alike (DESIGN §2, §3).

    async with open_middle(model, CloudConfig(url=None, threads=2)) as link:   # the CLIs
        engine = CompletionEngine.split(model, link.middle, config, context_length=link.max_seq_len)

    link = open_middle(model, config)   # long-running servers take the steps one by one
    await link.start()                  # find or start the cloud; RemoteMiddle (+ audit tap)
    await link.connect()                # the cloud runs our middle blocks? (CloudUnavailable)
    link.exit_status(); await link.reachable(); await link.restart(); await link.aclose()

`url` None: the real cloud service (`server.launch`) is started on 127.0.0.1 with a one-time
token for the link's lifetime, and still reached over the network; otherwise the URL, with its
bearer token given explicitly (a CLI's --token), else from the OS keyring entry
`cloud-token:<url>`, else from the environment variable `token_env`. While `umbra audit on`,
`link.middle` is the audit tap over the RemoteMiddle: it records what the cloud receives.
`link.privacy` is the privacy mode in force (umbra/privacy/mode.py): `start()` applies the
private-by-default rule (umbra/privacy/cloud_policy.py) before it sends or looks up anything, so
undefended states never go to a cloud not on this machine without the user's opt-in
(`allow_undefended_remote_cloud`; UndefendedCloudRefused otherwise).
Nothing here falls back to any other path (invariant 2): failures are CloudUnavailable or
ConfigError for the caller to report. This is the only module outside `server/` that imports
`server.launch` (tests/test_architecture.py)."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from keys.cloud_tokens import CLOUD_TOKEN_ENV, find_cloud_token
from keys.errors import KeyStoreError
from keys.store import DEFAULT_SERVICE
from server.launch import LocalCloud, local_cloud_sync
from umbra.errors import ConfigError
from umbra.middle.remote import RemoteMiddle
from umbra.privacy.cloud_policy import mode_in_force
from umbra.privacy.mode import PrivacyMode, mode_of

if TYPE_CHECKING:
    from umbra.audit.recorder import AuditTap
    from umbra.engine import ClientModel
    from umbra.middle.protocol import Middle

PROBE_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class CloudConfig:
    url: str | None = None  # None: start the real cloud service on 127.0.0.1 for the link's lifetime
    token: str | None = field(default=None, repr=False)  # explicit token; None: keyring, then token_env
    keyring_service: str = DEFAULT_SERVICE  # holds the entry `cloud-token:<url>`
    token_env: str = CLOUD_TOKEN_ENV  # environment variable tried when the keyring has no entry
    certificate: Path | None = None  # certificate to trust for an https:// cloud; None = system CAs
    threads: int | None = None  # torch intra-op threads of a self-started cloud; None = torch's default
    audit: bool | None = None  # record what the cloud receives; None: as `umbra audit on|off` says
    startup_timeout: float = 120.0  # seconds a self-started cloud may take to answer /healthz
    # Send states whose privacy mode is not defended to a cloud not on this machine (the user's
    # explicit opt-in; UMBRA_ALLOW_UNDEFENDED_REMOTE_CLOUD=1 too). umbra/privacy/cloud_policy.py.
    allow_undefended_remote_cloud: bool = False

    def validate(self) -> CloudConfig:
        if self.url is not None and not self.url.strip().startswith(("http://", "https://")):
            raise ConfigError(f"a cloud URL starts with http:// or https://, got {self.url!r}")
        if self.url is None and (self.token is not None or self.certificate is not None):
            raise ConfigError("a token or certificate applies to a configured cloud URL only")
        if self.token is not None and not self.token.strip():
            raise ConfigError("the cloud token is empty")
        if self.certificate is not None and not Path(self.certificate).is_file():
            raise ConfigError(f"the cloud certificate {self.certificate} is not a file")
        if not self.keyring_service or not self.token_env:
            raise ConfigError("keyring_service and token_env must not be empty")
        if self.threads is not None and self.threads < 1:
            raise ConfigError("threads must be >= 1")
        if not self.startup_timeout > 0:
            raise ConfigError("startup_timeout must be > 0")
        return self


def find_token(config: CloudConfig) -> str:
    """The bearer token for `config.url`: explicit, else the keyring entry, else the environment
    (blocking I/O). ConfigError saying where it looked when none has one."""
    if config.url is None:
        raise ConfigError("a self-started cloud issues its own token")
    if config.token is not None:
        return config.token
    try:
        return find_cloud_token(config.url, config.keyring_service, config.token_env)
    except KeyStoreError as exc:
        raise ConfigError(str(exc)) from exc


def with_token(config: CloudConfig) -> CloudConfig:
    """`config` with its token looked up now (a CLI fails on a missing token before loading a model)."""
    if config.url is None or config.token is not None:
        return config
    return replace(config, token=find_token(config))


class CloudLink:
    """Where the middle blocks run and the Middle to them. `url`, `token` and `verify` are set by
    `start()`; `local` is the self-started service (None for a configured URL). `mode`: the
    privacy mode of what will be sent (default: the model's, `mode_of(model)`; `umbra tune` gives
    the mode of the configuration it trains); `privacy` is the mode in force once started."""

    def __init__(self, model: ClientModel, config: CloudConfig, mode: PrivacyMode | None = None):
        self.model = model
        self.config = config.validate()
        self.mode = mode or mode_of(model)
        self.privacy: PrivacyMode = self.mode
        self.url: str | None = None
        self.token: str | None = None
        self.verify: Path | None = None  # certificate the RemoteMiddle trusts
        self.local: LocalCloud | None = None
        self.remote: RemoteMiddle | None = None
        self.audit: AuditTap | None = None
        self.info: dict | None = None  # the cloud's answer to connect()
        self._stack = contextlib.ExitStack()  # the self-started cloud, if any

    def __repr__(self) -> str:  # never the token
        return f"CloudLink({self.describe()})"

    # -- where -------------------------------------------------------------------------------
    def describe(self) -> str:
        if self.url is None:
            return "a cloud not started yet" if self.config.url is None else f"the cloud at {self.config.url}"
        return f"{'a self-started cloud' if self.local else 'the cloud'} at {self.url}"

    @property
    def self_started(self) -> bool:
        return self.config.url is None

    def exit_status(self) -> int | None:
        """The self-started service's exit status once it has died; None while it runs (or if remote)."""
        if self.local is None or self.local.process is None:
            return None
        return self.local.process.poll()

    async def reachable(self, timeout: float = PROBE_TIMEOUT_S) -> bool:
        """True if the cloud answers GET /healthz (no credentials, no payload)."""
        if self.url is None:
            return False
        verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=str(self.verify)) if self.verify else True
        async with httpx.AsyncClient(verify=verify, timeout=timeout) as client:
            try:
                return (await client.get(self.url + "/healthz")).status_code == 200
            except httpx.HTTPError:
                return False

    # -- the Middle --------------------------------------------------------------------------
    @property
    def middle(self) -> Middle:
        """What the engine sends through: the audit tap's recording Middle, or the RemoteMiddle."""
        if self.remote is None:
            raise ConfigError("the cloud link is not started")
        return self.remote if self.audit is None else self.audit.middle

    @property
    def max_seq_len(self) -> int | None:
        return None if self.info is None else self.info.get("max_seq_len")

    async def start(self) -> CloudLink:
        """Start the cloud on loopback (url None) or look up the token of the configured one, and
        make the RemoteMiddle and, when auditing, the audit tap (its encrypted store and keyring
        key ready before anything is sent). Sends nothing to a configured cloud. First of all the
        private-by-default rule: UndefendedCloudRefused for an undefended mode and a cloud not on
        this machine without the opt-in."""
        if self.url is not None:
            raise ConfigError("a cloud link starts once (restart() makes a new one)")
        config, model = self.config, self.model
        self.privacy = mode_in_force(self.mode, config.url, config.allow_undefended_remote_cloud)
        if config.url is None:
            settings = {} if config.threads is None else {"torch_threads": config.threads}
            dtype = str(model.dtype).removeprefix("torch.")
            if dtype != "float32":  # the middle in the client's dtype, as the whole model would run
                settings["dtype"] = dtype
            base = await asyncio.to_thread(model.check_base)
            cloud = local_cloud_sync(base, model.plan, settings=settings, startup_timeout=config.startup_timeout)
            self.local = await asyncio.to_thread(self._stack.enter_context, cloud)
            self.url, self.token, self.verify = self.local.base_url, self.local.token, self.local.verify
        else:
            self.token = await asyncio.to_thread(find_token, config)
            self.url, self.verify = config.url.strip().rstrip("/"), config.certificate
        self.remote = RemoteMiddle(self.url, self.token, hidden_size=model.spec.hidden_size, verify=self.verify,
                                   layers=model.plan.middle_range(model.spec.num_layers))
        if self._auditing():
            from umbra.audit.recorder import AuditTap

            self.audit = AuditTap(model, self.remote)
        return self

    def _auditing(self) -> bool:
        if self.config.audit is not None:
            return self.config.audit
        from umbra.audit.settings import audit_enabled

        return audit_enabled()

    async def connect(self) -> dict:
        """Connect the RemoteMiddle: checks the cloud runs our middle blocks; CloudUnavailable if
        it cannot be reached. Returns (and keeps in `info`) the cloud's description."""
        if self.remote is None:
            raise ConfigError("start the cloud link before connecting it")
        self.info = await self.remote.connect()
        return self.info

    def flush_audit(self) -> None:
        """Save the recorded sessions that have closed (servers: after each completion)."""
        if self.audit is not None:
            self.audit.flush_closed()

    async def restart(self) -> CloudLink:
        """A new started link in place of this one, whose self-started cloud died: this one is
        closed (its audit recordings saved, the dead service's files removed) and a fresh cloud
        is started (new port and token). The caller connects the new link; the sessions of the
        dead cloud are gone."""
        if not self.self_started:
            raise ConfigError("only a self-started cloud can be restarted")
        await self.aclose()
        fresh = CloudLink(self.model, self.config, self.mode)
        try:
            return await fresh.start()
        except BaseException:
            await fresh.aclose()
            raise

    # -- teardown ----------------------------------------------------------------------------
    async def aclose(self) -> None:
        """Save the audit recordings, close the connection and stop a self-started cloud. Idempotent.
        `url` and `local` stay as a record of where the link went."""
        try:
            if self.audit is not None:
                self.audit.close()
        finally:
            remote, self.remote = self.remote, None
            try:
                if remote is not None:
                    await remote.aclose()
            finally:
                await asyncio.to_thread(self._stack.close)

    def stop_cloud(self) -> None:
        """Synchronous last resort (the event loop is gone): stop a self-started cloud. Idempotent."""
        self._stack.close()

    async def __aenter__(self) -> CloudLink:
        try:
            await self.start()
            await self.connect()
        except BaseException:
            await self.aclose()
            raise
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()


def open_middle(model: ClientModel, config: CloudConfig | None = None, mode: PrivacyMode | None = None) -> CloudLink:
    """The link to the cloud for `model`'s split: `async with` it for a connected Middle that is
    closed (and a self-started cloud stopped) on exit, or drive its steps (servers). `mode`: see
    CloudLink."""
    return CloudLink(model, config or CloudConfig(), mode)
