"""Bearer tokens of cloud services in the OS keyring: one entry `cloud-token:<url>` per cloud (the
URL without trailing slashes). `umbra keys cloud-token set URL` stores one (read from stdin,
never argv: argv is visible to every local user in `ps`); the language server, the local HTTP
server, `umbra complete --cloud URL` and `umbra tune --cloud URL` find it with `find_cloud_token`
(through umbra/connect.py, which also honours a CLI's discouraged --token)."""

from __future__ import annotations

import os

from keys.errors import KeyNotFound, KeyStoreError
from keys.store import KeyStore

CLOUD_TOKEN_PREFIX = "cloud-token:"
CLOUD_TOKEN_ENV = "UMBRA_CLOUD_TOKEN"  # the default variable tried when the keyring has no entry


class CloudTokenMissing(KeyStoreError):
    """Neither the keyring nor the environment holds a token for that cloud."""


def cloud_token_name(url: str) -> str:
    """The keyring entry name of the token for the cloud at `url`."""
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")) or len(url) <= len("https://"):
        raise KeyStoreError(f"a cloud URL starts with http:// or https://, got {url!r}")
    return CLOUD_TOKEN_PREFIX + url


def find_cloud_token(url: str, service: str, env_name: str) -> str:
    """The token for `url`: the keyring entry first, then the environment variable `env_name`.
    Raises CloudTokenMissing (saying where it looked) when neither has one. Blocking I/O."""
    name = cloud_token_name(url)
    try:
        return KeyStore(service).get(name).decode("utf-8")
    except KeyNotFound:
        why = f"no keyring entry {name!r} in service {service!r}"
    except UnicodeDecodeError as exc:
        raise KeyStoreError(f"keyring entry {name!r} is not a UTF-8 token") from exc
    except KeyStoreError as exc:  # no OS keyring on this machine: the environment may still hold it
        why = f"the OS keyring is unavailable ({type(exc).__name__})"
    token = os.environ.get(env_name, "").strip()
    if token:
        return token
    raise CloudTokenMissing(f"no token for the cloud at {url}: {why} and ${env_name} is not set "
                            f"(store one with `umbra keys cloud-token set {url}`, which reads it from stdin)")

