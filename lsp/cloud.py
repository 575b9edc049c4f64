"""The cloud a client server completes through — always the real network path (DESIGN §2).

    link = open_middle(model, cloud_config(options))   # umbra/connect.py: CloudLink
    await link.start(); await link.connect()           # link.middle: the RemoteMiddle (or audit tap)

`cloud.url` null: the real cloud service is started on 127.0.0.1 for the server's lifetime (the
link stops it), exactly as `umbra complete` does with no cloud configured. Otherwise the
configured URL, with its bearer token from the OS keyring entry `cloud-token:<url>` of
`model.keyringService`, or else from the environment variable named by `cloud.tokenEnv`. Never
from settings or argv. How the link is made is umbra/connect.py's, shared with the CLIs; this
module only maps the server's options onto it, the opt-in `allowUndefendedRemoteCloud` of the
private-by-default rule (umbra/privacy/cloud_policy.py) included."""

from __future__ import annotations

from pathlib import Path

from lsp.options import InitializationOptions
from umbra.connect import CloudConfig, find_token


def cloud_config(options: InitializationOptions) -> CloudConfig:
    """The link's configuration from the server's options (no token: looked up when it starts)."""
    cert = Path(options.cloud.certificate) if options.cloud.certificate else None
    return CloudConfig(url=options.cloud.url, keyring_service=options.model.keyring_service,
                       token_env=options.cloud.token_env, certificate=cert, threads=options.threads,
                       allow_undefended_remote_cloud=options.allow_undefended_remote_cloud)


def cloud_token(options: InitializationOptions) -> str:
    """The bearer token for `options.cloud.url`: keyring first, then the environment (blocking I/O)."""
    return find_token(cloud_config(options))
