"""`umbra keys list` and `umbra keys cloud-token`: what the OS keyring holds for Umbra, and cloud
tokens. Only entry names are ever printed, never secrets. (`umbra keys rotate` re-encrypts a client
bundle, so it lives with the command in umbra/cli/keys_cmd.py: `keys` is the bottom layer and
imports nothing of the privacy layer.)"""

from __future__ import annotations

import sys

from keys.access_keys import read_secret_text
from keys.cloud_tokens import CLOUD_TOKEN_PREFIX, cloud_token_name
from keys.store import DEFAULT_SERVICE, KeyStore


def list_keys(service: str = DEFAULT_SERVICE, out=None) -> int:
    out = out or sys.stdout  # at call time: a default bound at import outlives a redirected stdout
    names = KeyStore(service).list()
    if not names:
        print(f"no keys in the OS keyring for service {service!r}", file=out)
    for name in names:
        print(name, file=out)
    return 0


# -- cloud tokens (keys/cloud_tokens.py) -----------------------------------------------------------

def read_token(stream=None) -> str:
    """The token typed at a hidden prompt (a terminal) or piped on stdin; surrounding whitespace dropped."""
    return read_secret_text("cloud token", stream)


def set_cloud_token(url: str, token: str, service: str = DEFAULT_SERVICE, out=None) -> int:
    out = out or sys.stdout
    name = cloud_token_name(url)
    KeyStore(service).set(name, token.encode("utf-8"))
    print(f"stored the token for {name[len(CLOUD_TOKEN_PREFIX):]} in the OS keyring (service {service!r})", file=out)
    return 0


def delete_cloud_token(url: str, service: str = DEFAULT_SERVICE, out=None) -> int:
    out = out or sys.stdout
    name = cloud_token_name(url)
    KeyStore(service).delete(name)
    print(f"deleted the token for {name[len(CLOUD_TOKEN_PREFIX):]} from the OS keyring (service {service!r})", file=out)
    return 0
