"""A real nginx (Debian package `nginx`) in front of cloud replicas on loopback, configured by
deploy/nginx/render.py exactly as the README shows: unprivileged-style, in the foreground,
with its pid file, logs and temp paths in a test directory."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from server.launch import wait_healthy
from umbra.paths import repo_root

RENDER = repo_root() / "deploy" / "nginx" / "render.py"
_LINE = re.compile(r'^\S+ (\d{3}) "(\S+) (\S+)" session=(\S+) upstream="([^"]*)" upstream_status="([^"]*)"$')


@dataclass(frozen=True)
class Access:
    """One line of the balancer's access log (log_format umbra)."""

    status: int
    method: str
    uri: str
    session: str | None  # the X-Umbra-Session routing key; None when the request had none
    upstreams: tuple[str, ...]  # replicas tried, in order ("127.0.0.1:PORT")


@dataclass
class Balancer:
    base_url: str
    run_dir: Path
    process: subprocess.Popen

    def accesses(self) -> list[Access]:
        out = []
        for line in (self.run_dir / "access.log").read_text().splitlines():
            m = _LINE.match(line)
            if m is None:
                raise AssertionError(f"access log line not in the umbra format: {line!r}")
            status, method, uri, session, upstream, _ = m.groups()
            out.append(Access(int(status), method, uri, None if session == "-" else session,
                              tuple(u for u in re.split(r", | : ", upstream) if u != "-")))
        return out

    def logs(self) -> str:
        parts = []
        for name in ("nginx.conf", "error.log", "access.log"):
            path = self.run_dir / name
            text = path.read_text(errors="replace") if path.exists() else "(missing)"
            parts.append(f"--- balancer {name} ---\n{text[-6000:]}")
        return "\n".join(parts)


def nginx_binary() -> str:
    found = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if Path(p).exists()), None)
    if found is None:
        raise AssertionError("nginx is not installed: install the Debian package `nginx` "
                             "(scripts/bootstrap.sh dev does)")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def render_command(replicas: list[str], listen: str, run_dir: Path, *extra: str) -> list[str]:
    """The README's render command for these replicas."""
    cmd = [sys.executable, str(RENDER), "--listen", listen, "--run-dir", str(run_dir)]
    for r in replicas:
        cmd += ["--replica", r]
    return cmd + list(extra)


@contextmanager
def nginx_balancer(replicas: list[str], run_dir: Path, timeout: float = 30.0,
                   extra: tuple[str, ...] = ()) -> Iterator[Balancer]:
    """nginx balancing `replicas` (HOST:PORT) on a free loopback port until the block ends;
    `extra`: more render.py flags (e.g. --max-connections-per-address)."""
    nginx = nginx_binary()
    run_dir.mkdir(parents=True, exist_ok=True)
    conf = run_dir / "nginx.conf"
    port = free_port()
    user = ["--user", "root"] if os.geteuid() == 0 else []  # workers keep our identity: the temp dir is ours
    rendered = subprocess.run(render_command(replicas, f"127.0.0.1:{port}", run_dir, *user, *extra, "-o", str(conf)),
                              capture_output=True, text=True, timeout=30)
    if rendered.returncode != 0:
        raise AssertionError(f"render.py failed: {rendered.stderr}")
    base = [nginx, "-p", str(run_dir), "-e", str(run_dir / "error.log"), "-c", str(conf)]
    checked = subprocess.run([*base, "-t"], capture_output=True, text=True, timeout=30)
    if checked.returncode != 0:
        raise AssertionError(f"nginx -t rejected the rendered configuration:\n{checked.stderr}")
    with open(run_dir / "stderr.log", "wb") as err:
        proc = subprocess.Popen([*base, "-g", "daemon off;"], stdout=err, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
    balancer = Balancer(f"http://127.0.0.1:{port}", run_dir, proc)
    try:
        _wait_listening(balancer, timeout)
        yield balancer
    finally:
        proc.terminate()  # SIGTERM: nginx's fast shutdown
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_listening(balancer: Balancer, timeout: float) -> None:
    why = wait_healthy(balancer.base_url, balancer.process, time.monotonic() + timeout)
    if why is not None:
        raise AssertionError(f"nginx not serving the replicas' /healthz: {why}\n{balancer.logs()}")
