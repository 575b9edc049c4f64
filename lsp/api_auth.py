"""Who may use the local HTTP API (`umbra serve`).

Loopback is not a boundary on a shared machine: any local user or process — and, through DNS
rebinding, any web page the user opens — can reach 127.0.0.1. Completions run the user's
private model (a bundle unlocked with the keyring's key), and a warm session's `reusedTokens`
tells how much of a guessed prompt matches what the editor sent. So:

* every route but GET /healthz needs `Authorization: Bearer <token>` (and /healthz without it
  says only whether the server is ready: no message, sessions or completion counts, which would
  tell another local user when and how much this one is working); the token is made fresh at
  each start (CSPRNG), written to a file only the user can read (0600 in a 0700 directory,
  `$XDG_RUNTIME_DIR/umbra/serve-<port>.token` by default) and deleted at shutdown — clients read
  it from there, as Jupyter's and Docker's local clients do;
* while the server listens on loopback it answers only requests whose Host header names a
  loopback address (a rebinding page's Host is its own domain), 421 otherwise;
* `--no-auth` (UMBRA_LOCAL_AUTH=false) turns the token off for a single-user machine; the Host
  check stays.

The token is compared in constant time and never logged."""

from __future__ import annotations

import hmac
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from umbra.edge import EDGE_EXTENSION
from umbra.errors import UmbraError

if TYPE_CHECKING:  # the language server never loads FastAPI; only the HTTP server (http_app.py) does
    from fastapi import Request

LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})


class Unauthorized(UmbraError):
    """Missing or wrong API token (HTTP 401)."""


class MisdirectedHost(UmbraError):
    """A Host header that does not name this loopback server (HTTP 421; DNS rebinding)."""


@dataclass(frozen=True)
class ApiAuth:
    token: str | None  # None: no token required (--no-auth)
    loopback_only: bool  # the Host header must name a loopback address

    def check(self, request: Request, *, token_required: bool) -> None:
        if self.loopback_only and host_name(request.headers.get("host", "")) not in LOOPBACK_NAMES:
            raise MisdirectedHost("this server answers only requests addressed to 127.0.0.1, ::1 or localhost")
        if token_required and not self.authorized(request):
            raise Unauthorized("missing or wrong API token: send 'Authorization: Bearer <token>' with the "
                               "token from the file `umbra serve` printed at start")
        if self.token is not None and self.authorized(request):  # the token proves the connection (umbra/edge.py)
            edge = request.scope.get("extensions", {}).get(EDGE_EXTENSION)
            if edge is not None:
                edge["authenticated"]()

    def authorized(self, request: Request) -> bool:
        """The request carries the API token (always true with --no-auth)."""
        if self.token is None:
            return True
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), self.token.encode())


# RFC 9110/3986 Host: `[IPv6]` or a name/IPv4 (no brackets, colons, '@' or '/'), then `:port`.
_HOST = re.compile(r"(?:\[(?P<ip6>[0-9a-f:.]+)\]|(?P<name>[^\[\]:/@\s]+))(?::\d{0,5})?")


def host_name(header: str) -> str:
    """The host part of a Host header: 'localhost:8765' -> 'localhost', '[::1]:8765' -> '::1';
    '' when the header is not one host (e.g. '[::1].evil.example', which only starts with one)."""
    match = _HOST.fullmatch(header.strip().lower())
    if match is None:
        return ""
    return match.group("ip6") or match.group("name")


def new_token() -> str:
    return secrets.token_urlsafe(32)


def default_token_file(port: int) -> Path:
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime) if runtime and Path(runtime).is_dir() else Path.home() / ".cache"
    return base / "umbra" / f"serve-{port}.token"


def write_token_file(path: Path, token: str) -> Path:
    """Write `token` to `path`, readable by this user only (the directory made 0700 if new)."""
    path = Path(path)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o600)  # whatever the umask
        os.write(fd, (token + "\n").encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return path


def remove_token_file(path: Path) -> None:
    try:
        Path(path).unlink()
    except FileNotFoundError:
        pass
