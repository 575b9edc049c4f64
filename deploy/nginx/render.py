#!/usr/bin/env python3
"""Render deploy/nginx/umbra-cloud.conf.template: nginx in front of several Umbra cloud replicas,
each session kept on one replica by the hash of its routing key (X-Umbra-Session).

    python deploy/nginx/render.py --replica 10.0.0.11:8443 --replica 10.0.0.12:8443 \\
        --listen 0.0.0.0:443 --tls-cert /etc/umbra/cert.pem --tls-key /etc/umbra/key.pem \\
        --run-dir /var/lib/umbra-nginx --user www-data -o /etc/umbra/nginx.conf
    nginx -t -c /etc/umbra/nginx.conf && nginx -c /etc/umbra/nginx.conf

Standard library only: it runs on the balancer host without the project installed. The tests
(tests/server/test_replicas.py) run this same script and the nginx it configures."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

TEMPLATE = Path(__file__).with_name("umbra-cloud.conf.template")
_ADDRESS = re.compile(r"^(\[[0-9A-Fa-f:]+\]|[A-Za-z0-9.-]+):(\d{1,5})$")
_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


class RenderError(Exception):
    """A flag value nginx would misread (or reject only at start)."""


def _address(value: str) -> str:
    m = _ADDRESS.match(value)
    if m is None or not 0 < int(m.group(2)) < 65536:
        raise RenderError(f"expected HOST:PORT, got {value!r}")
    return value


def _path(value: Path) -> str:
    text = str(value.resolve())
    if re.search(r"[\s;{}'\"$]", text):
        raise RenderError(f"a path nginx reads must not hold spaces, quotes, ';', '{{', '}}' or '$': {text!r}")
    return text


def render(replicas: list[str], listen: str, run_dir: Path, *, user: str | None = None,
           tls_cert: Path | None = None, tls_key: Path | None = None, max_body_bytes: int = 64 * 1024**2 + 4096,
           max_connections_per_address: int = 128, stream_idle_seconds: float = 300.0,
           connect_timeout: float = 2.0, fail_timeout: float = 10.0) -> str:
    """The nginx configuration as text. `max_body_bytes`: the replicas' max_frame_bytes plus
    slack; `stream_idle_seconds`: their ws_idle_seconds (nginx waits 30 s longer)."""
    if not replicas:
        raise RenderError("at least one --replica HOST:PORT")
    if (tls_cert is None) != (tls_key is None):
        raise RenderError("TLS needs both --tls-cert and --tls-key")
    if user is not None and not re.fullmatch(r"[A-Za-z0-9._-]{1,32}", user):
        raise RenderError(f"not a user name: {user!r}")
    for name, value in (("max_body_bytes", max_body_bytes),
                        ("max_connections_per_address", max_connections_per_address),
                        ("stream_idle_seconds", stream_idle_seconds), ("connect_timeout", connect_timeout),
                        ("fail_timeout", fail_timeout)):
        if value <= 0:
            raise RenderError(f"{name} must be > 0")
    fail = f"{max(1, round(fail_timeout))}s"
    servers = "\n".join(f"        server {_address(r)} max_fails=1 fail_timeout={fail};" for r in replicas)
    listen_lines = f"        listen {_address(listen)}{' ssl' if tls_cert else ''};"
    if tls_cert is not None:
        listen_lines += (f"\n        ssl_certificate {_path(tls_cert)};\n        ssl_certificate_key {_path(tls_key)};"
                         "\n        ssl_protocols TLSv1.2 TLSv1.3;")
    values = {
        "user": f"user {user};\n" if user else "",
        "run_dir": _path(run_dir),
        "servers": servers,
        "listen": listen_lines,
        "max_body_bytes": str(int(max_body_bytes)),
        "max_connections_per_address": str(int(max_connections_per_address)),
        "connect_timeout": f"{max(1, round(connect_timeout))}s",
        "read_timeout": f"{round(stream_idle_seconds) + 30}s",
        "fail_timeout": fail,
    }
    text = TEMPLATE.read_text()
    missing = set(_PLACEHOLDER.findall(text)) - set(values)
    if missing:
        raise RenderError(f"the template names unknown placeholders: {sorted(missing)}")
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="render.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--replica", action="append", required=True, metavar="HOST:PORT",
                   help="a cloud replica (repeat for each); all share one token file")
    p.add_argument("--listen", default="0.0.0.0:8080", metavar="HOST:PORT", help="where clients connect")
    p.add_argument("--run-dir", type=Path, required=True, help="pid file, logs and temp paths (must exist)")
    p.add_argument("--user", help="worker user when nginx starts as root (e.g. www-data)")
    p.add_argument("--tls-cert", type=Path, help="PEM certificate: clients connect over HTTPS/WSS")
    p.add_argument("--tls-key", type=Path)
    p.add_argument("--max-body-bytes", type=int, default=64 * 1024**2 + 4096,
                   help="largest request body: the replicas' max_frame_bytes + slack")
    p.add_argument("--max-connections-per-address", type=int, default=128, help="open connections per client IP")
    p.add_argument("--stream-idle-seconds", type=float, default=300.0, help="the replicas' ws_idle_seconds")
    p.add_argument("--connect-timeout", type=float, default=2.0, help="seconds to reach a replica")
    p.add_argument("--fail-timeout", type=float, default=10.0,
                   help="seconds a replica that refused a connection is left out")
    p.add_argument("-o", "--output", type=Path, help="write here (default: stdout)")
    args = p.parse_args(argv)
    try:
        text = render(args.replica, args.listen, args.run_dir, user=args.user, tls_cert=args.tls_cert,
                      tls_key=args.tls_key, max_body_bytes=args.max_body_bytes,
                      max_connections_per_address=args.max_connections_per_address,
                      stream_idle_seconds=args.stream_idle_seconds, connect_timeout=args.connect_timeout,
                      fail_timeout=args.fail_timeout)
    except RenderError as exc:
        print(f"render.py: {exc}", file=sys.stderr)
        return 2
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
