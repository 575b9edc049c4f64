"""Start the real cloud service as a subprocess on 127.0.0.1 for the CLI (`umbra complete` with
no cloud configured) and for tests.

    async with local_cloud(model_dir) as (base_url, token): ...
    with local_cloud_sync(model_dir, tls=True) as cloud: cloud.base_url, cloud.token, cloud.verify
    with local_cloud_sync(model_dir, token_file=shared) as a, local_cloud_sync(model_dir, token_file=shared) as b:
        ...   # two replicas accepting each other's tokens (deploy/nginx/ puts a balancer before them)
    with local_cloud_thread(model_dir) as cloud: ...   # same service in a thread of this process

The service runs `python -m server` (or, for `local_cloud_thread`, uvicorn in a thread of this
process: faster to start, real sockets all the same) on a free port with a freshly issued token whose hash sits
in a private (0700) temp directory, together with the TLS pair when `tls=True`; the token
itself exists only in this process. On exit the service is terminated and the directory removed.

Every service started here reports the 5xx it answered to the test suite as it stops
(server/service_reports.py: the suite fails a test whose services answered a 5xx)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import ssl
import subprocess
import sys
import tempfile
import time
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import AsyncIterator, Iterator

import httpx

from server.auth import TokenStore
from server.service_reports import LIVE, READER, count_5xx, report, report_file, write_report
from umbra.errors import CloudUnavailable, UmbraError
from umbra.model.parts import SplitPlan
from umbra.processes import end_process

_REPO = Path(__file__).resolve().parent.parent


@dataclass
class LocalCloud:
    base_url: str
    token: str
    process: subprocess.Popen | None  # None when served in a thread
    workdir: Path  # private temp dir: token file, TLS pair, service log
    verify: Path | None = None  # certificate to trust (tls=True)
    server: object | None = None  # the uvicorn.Server when served in a thread
    token_file: Path | None = None  # the token file it reads (default: workdir / "tokens.json")
    serial: int = field(default_factory=itertools.count().__next__)  # unique in this process (LIVE's key)

    def __iter__(self):  # `as (base_url, token)`
        return iter((self.base_url, self.token))

    @property
    def log_path(self) -> Path:
        return self.workdir / "cloud.log"

    def kill(self) -> None:
        """SIGKILL the service (tests: the cloud dying mid-decode). Subprocess services only."""
        if self.process is None:
            raise RuntimeError("a service in a thread cannot be killed; use local_cloud / local_cloud_sync")
        self.process.kill()
        self.process.wait()

    def add_token(self, name: str) -> str:
        """Issue another client's token (the service re-reads its token file)."""
        return TokenStore(self.token_file or self.workdir / "tokens.json").add(name)

    def server_errors(self, issue_token: bool = False) -> int | None:
        """The 5xx the service has answered so far (its /metrics), or None when it cannot tell
        (killed, or its token revoked: `issue_token` then issues a fresh one to read them)."""
        if self.server is not None:  # in this process: the app's own counters
            app = getattr(self.server.config, "app", None)
            metrics = getattr(getattr(app, "state", None), "metrics", None)
            return None if metrics is None else count_5xx(metrics.render())
        if self.process is None or self.process.poll() is not None or not self.base_url:
            return None
        return self.read_server_errors(issue_token)

    def read_server_errors(self, issue_token: bool = False) -> int | None:
        """`server_errors` of a service at `base_url`, wherever it runs (None: it cannot tell)."""
        verify = ssl.create_default_context(cafile=str(self.verify)) if self.verify else True
        transport = httpx.HTTPTransport(local_address=READER, verify=verify)
        try:
            with httpx.Client(base_url=self.base_url, timeout=10, transport=transport) as http:
                r = http.get("/metrics", headers={"Authorization": f"Bearer {self.token}"})
                if r.status_code == 401 and issue_token:
                    r = http.get("/metrics", headers={"Authorization": f"Bearer {self.add_token('launch-check')}"})
        except (httpx.HTTPError, UmbraError, OSError):  # down, or a token file it cannot read
            return None
        return count_5xx(r.text) if r.status_code == 200 else None


def _env_value(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _start(workdir: Path, model_dir, plan: SplitPlan | None, tls: bool, settings: dict, timeout: float,
           token_file: Path | None = None) -> LocalCloud:
    token_file = token_file or workdir / "tokens.json"
    token = TokenStore(token_file).add("local")
    env = {k: v for k, v in os.environ.items() if not k.startswith("UMBRA_CLOUD_")}
    env.update({f"UMBRA_CLOUD_{k.upper()}": _env_value(v) for k, v in settings.items()})
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_REPO), env.get("PYTHONPATH")]))
    ready = workdir / "ready.json"
    cmd = [sys.executable, "-m", "server", "--model-dir", str(model_dir), "--host", "127.0.0.1", "--port", "0",
           "--token-file", str(token_file), "--ready-file", str(ready),
           "--exit-with-parent", str(os.getpid())]
    if plan is not None:
        cmd += ["--encoder-blocks", str(plan.encoder_blocks), "--decoder-blocks", str(plan.decoder_blocks)]
    verify = None
    if tls:
        from server.tls import make_self_signed

        verify, key = make_self_signed(workdir / "tls")
        cmd += ["--tls-cert", str(verify), "--tls-key", str(key)]
    with open(workdir / "cloud.log", "wb") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    cloud = LocalCloud("", token, proc, workdir, verify, token_file=token_file)
    try:
        _wait_ready(cloud, ready, timeout)
    except BaseException:
        _stop(cloud)
        raise
    LIVE[cloud.serial] = cloud
    if (announce := report_file(cloud)) is not None:  # a child process of the suite: announce it
        write_report(announce, cloud, stopped=False)
    return cloud


def _wait_ready(cloud: LocalCloud, ready: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout

    def fail(why: str):
        tail = cloud.log_path.read_text(errors="replace")[-2000:] if cloud.log_path.exists() else ""
        return CloudUnavailable(f"local cloud did not start ({why}); log tail:\n{tail}")

    while not ready.exists():
        if cloud.process.poll() is not None:
            raise fail(f"exited with status {cloud.process.returncode}")
        if time.monotonic() > deadline:
            raise fail(f"not listening after {timeout:.0f}s")
        time.sleep(0.05)
    info = json.loads(ready.read_text())
    cloud.base_url = f"{info['scheme']}://127.0.0.1:{info['port']}"
    verify = ssl.create_default_context(cafile=str(cloud.verify)) if cloud.verify else True
    why = wait_healthy(cloud.base_url, cloud.process, deadline, verify)
    if why is not None:
        raise fail(why)


def wait_healthy(base_url: str, process: subprocess.Popen, deadline: float,
                 verify: ssl.SSLContext | bool = True) -> str | None:
    """Poll `base_url`/healthz until it answers 200 (None), `process` exits or time.monotonic()
    passes `deadline` (why not, in words). Also used for a balancer in front of replicas."""
    with httpx.Client(verify=verify, timeout=5.0) as client:
        while True:
            if process.poll() is not None:
                return f"exited with status {process.returncode}"
            try:
                if client.get(base_url + "/healthz").status_code == 200:
                    return None
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                return "/healthz not ready in time"
            time.sleep(0.1)


def _stop(cloud: LocalCloud) -> None:
    report(cloud)
    end_process(cloud.process, grace=10)


@contextlib.contextmanager
def local_cloud_sync(model_dir, plan: SplitPlan | None = None, *, tls: bool = False,
                     settings: dict | None = None, startup_timeout: float = 120.0,
                     token_file: Path | None = None) -> Iterator[LocalCloud]:
    """Run the service for the duration of the block. `settings`: CloudSettings fields
    (e.g. {"kv_budget_bytes": 10**6, "debug_routes": True}), passed as UMBRA_CLOUD_* variables.
    `token_file`: a token file shared with other replicas (its token is issued there), else a
    private one in the temp directory."""
    with tempfile.TemporaryDirectory(prefix="umbra-cloud-") as tmp:
        cloud = _start(Path(tmp), model_dir, plan, tls, settings or {}, startup_timeout, token_file)
        try:
            yield cloud
        finally:
            _stop(cloud)


@contextlib.asynccontextmanager
async def local_cloud(model_dir, plan: SplitPlan | None = None, *, tls: bool = False,
                      settings: dict | None = None, startup_timeout: float = 120.0,
                      token_file: Path | None = None) -> AsyncIterator[LocalCloud]:
    """Async variant of `local_cloud_sync` (start and stop run off the event loop)."""
    with tempfile.TemporaryDirectory(prefix="umbra-cloud-") as tmp:
        cloud = await asyncio.to_thread(_start, Path(tmp), model_dir, plan, tls, settings or {}, startup_timeout,
                                        token_file)
        try:
            yield cloud
        finally:
            await asyncio.to_thread(_stop, cloud)


@contextlib.contextmanager
def local_cloud_thread(model_dir, plan: SplitPlan | None = None, *, tls: bool = False,
                       settings: dict | None = None, startup_timeout: float = 60.0) -> Iterator[LocalCloud]:
    """The service under uvicorn in a daemon thread of this process, on a real loopback socket."""
    import threading

    import uvicorn

    from server.serve import bind, uvicorn_config
    from server.settings import CloudSettings

    with tempfile.TemporaryDirectory(prefix="umbra-cloud-") as tmp:
        workdir = Path(tmp)
        token = TokenStore(workdir / "tokens.json").add("local")
        fields = dict(model_dir=Path(model_dir), host="127.0.0.1", port=0, token_file=workdir / "tokens.json")
        if plan is not None:
            fields.update(encoder_blocks=plan.encoder_blocks, decoder_blocks=plan.decoder_blocks)
        verify = None
        if tls:
            from server.tls import make_self_signed

            verify, key = make_self_signed(workdir / "tls")
            fields.update(tls_cert=verify, tls_key=key)
        config = CloudSettings(**{**fields, **(settings or {})}).check()
        sock = bind(config)
        server = uvicorn.Server(uvicorn_config(config))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="umbra-cloud", daemon=True)
        thread.start()
        deadline = time.monotonic() + startup_timeout
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                server.should_exit = True
                sock.close()
                raise CloudUnavailable("local cloud thread did not start (see the log output above)")
            time.sleep(0.02)
        scheme = "https" if tls else "http"
        cloud = LocalCloud(f"{scheme}://127.0.0.1:{sock.getsockname()[1]}", token, None, workdir, verify, server)
        LIVE[cloud.serial] = cloud
        try:
            yield cloud
        finally:
            report(cloud)
            server.should_exit = True
            thread.join(timeout=30)
            sock.close()
