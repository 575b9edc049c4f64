"""Where the middle blocks run, for `umbra complete` and `umbra tune`: the shared --cloud,
--token and --cloud-cert options and the link configuration they make (umbra/connect.py).

A URL from --cloud or UMBRA_CLOUD_URL; its token from --token (visible in `ps`), else the OS
keyring entry stored by `umbra keys cloud-token set URL` in --service's keyring, else
UMBRA_CLOUD_TOKEN. No URL: the real cloud service is started on 127.0.0.1 for the command.
A cloud not on this machine receives only an offered privacy mode (defended, and above the client's blocks alone) unless
--allow-undefended-remote-cloud (or UMBRA_ALLOW_UNDEFENDED_REMOTE_CLOUD=1) says otherwise
(umbra/privacy/cloud_policy.py; `umbra lsp` and `umbra serve` take the flag too).
Torch-free at import: building the parser must stay cheap."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from umbra.connect import CloudConfig

URL_ENV = "UMBRA_CLOUD_URL"


def add_cloud_args(group) -> None:
    group.add_argument("--cloud", metavar="URL", default=None, help=f"cloud service URL (env {URL_ENV})")
    group.add_argument("--token", default=None,
                       help="cloud access token (visible in `ps`; prefer the keyring entry stored by "
                            "`umbra keys cloud-token set URL`, or UMBRA_CLOUD_TOKEN)")
    group.add_argument("--cloud-cert", metavar="PEM", default=None, help="certificate to trust for an HTTPS cloud")
    add_opt_in_arg(group)


def add_opt_in_arg(group) -> None:
    """--allow-undefended-remote-cloud, the explicit opt-in of umbra/privacy/cloud_policy.py."""
    group.add_argument("--allow-undefended-remote-cloud", action="store_true",
                       help="send hidden states whose privacy mode is not defended (e.g. no client bundle: the "
                            "cloud reads ~99.9 %% of tokens), or is defended but completes below the client's own "
                            "blocks alone, to a cloud that is not on this machine; without it such a link is refused "
                            "(env UMBRA_ALLOW_UNDEFENDED_REMOTE_CLOUD=1; docs/privacy/mode.md)")


def cloud_url(args) -> str | None:
    return args.cloud or os.environ.get(URL_ENV) or None


def cloud_config(args, *, audit: bool | None) -> CloudConfig:
    """The link's configuration, its token looked up now (a missing one fails before a model loads).
    With no URL, --token and --cloud-cert have nothing to apply to and are ignored."""
    from keys import DEFAULT_SERVICE
    from umbra.connect import CloudConfig, with_token

    url = cloud_url(args)
    config = CloudConfig(url=url, token=(args.token or None) if url else None,
                         keyring_service=args.service or DEFAULT_SERVICE,
                         certificate=Path(args.cloud_cert) if url and args.cloud_cert else None,
                         threads=args.threads, audit=audit,
                         allow_undefended_remote_cloud=args.allow_undefended_remote_cloud)
    return with_token(config.validate())


async def with_middle(model, cloud: CloudConfig | None, go, on_link=None):
    """`await go(middle)` with the middle blocks in this process (`cloud` None: a LocalMiddle of
    the model's base) or through the cloud link `cloud` configures (`on_link(link)` first)."""
    if cloud is None:
        from umbra.middle.local import LocalMiddle

        return await go(LocalMiddle(model.load_middle()))
    from umbra.connect import open_middle

    async with open_middle(model, cloud) as link:
        if on_link is not None:
            await on_link(link)
        return await go(link.middle)
