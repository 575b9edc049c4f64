"""`umbra serve` — the local completion HTTP server (lsp/http_app.py): OpenAI's completions API
(POST /v1/completions, GET /v1/models; base URL http://127.0.0.1:8765/v1, the API token as the
API key), Umbra's own POST /v1/infill, DELETE /v1/sessions/{id}, GET /healthz, on
127.0.0.1:8765 by default.

Settings come from UMBRA_LOCAL_* variables (lsp/settings.py), overridden by these flags. With
no cloud URL the real cloud service is started on 127.0.0.1 for the server's lifetime. A
configured cloud's token comes from the OS keyring (`umbra keys cloud-token set URL`) or from
the variable named by --token-env (default UMBRA_CLOUD_TOKEN); never from a flag. A cloud not on
this machine receives only a defended privacy mode unless --allow-undefended-remote-cloud (or
UMBRA_LOCAL_ALLOW_UNDEFENDED_REMOTE_CLOUD=true, or UMBRA_ALLOW_UNDEFENDED_REMOTE_CLOUD=1) opts in.
Every completion response carries the mode in force in its X-Umbra-Privacy header, and GET
/healthz (with the token) its figures (docs/privacy/mode.md). --client-only completes with the
client's blocks alone (no cloud at all; the status's mode says "client-only").

Every route but /healthz needs `Authorization: Bearer <token>`: a token made fresh at each start
and written to a file only you can read (printed at start; default
$XDG_RUNTIME_DIR/umbra/serve-PORT.token, deleted at shutdown). --no-auth drops it."""

from __future__ import annotations

import argparse
from pathlib import Path

from umbra.cli.cloud_args import add_opt_in_arg

# flag -> LocalSettings field (None values are left to the environment / defaults)
_FLAGS = {"host": "host", "port": "port", "model": "model_dir", "bundle": "bundle", "service": "keyring_service",
          "cloud": "cloud_url", "cloud_cert": "cloud_certificate", "token_env": "cloud_token_env",
          "threads": "threads", "max_sessions": "max_sessions", "token_file": "token_file", "dtype": "dtype"}


def register(sub) -> None:
    p = sub.add_parser("serve", help="run the local completion HTTP server",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default=None, help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help="port (default 8765; 0 = any free port)")
    p.add_argument("--model", type=Path, default=None, help="model directory (default: the embedded model)")
    p.add_argument("--bundle", type=Path, default=None, metavar="DIR", help="client bundle (`umbra init`)")
    p.add_argument("--service", default=None, help="keyring service of the bundle key and cloud tokens (default umbra)")
    p.add_argument("--cloud", metavar="URL", default=None, help="cloud URL (default: start one on 127.0.0.1)")
    p.add_argument("--cloud-cert", metavar="PEM", type=Path, default=None, help="certificate to trust for an https cloud")
    p.add_argument("--token-env", metavar="VAR", default=None, help="variable holding the cloud token if the keyring has none")
    p.add_argument("--dtype", choices=("fp32", "bf16"), default=None,
                   help="the client's compute dtype, and the hidden states' on the wire; a self-started cloud "
                        "computes the middle in it too (default fp32; env UMBRA_LOCAL_MODEL__DTYPE)")
    p.add_argument("--threads", type=int, default=None, help="torch threads here and in a self-started cloud")
    p.add_argument("--max-sessions", type=int, default=None, help="warm sessions kept (default 16)")
    p.add_argument("--token-file", type=Path, default=None,
                   help="where to write this run's API token (default $XDG_RUNTIME_DIR/umbra/serve-PORT.token)")
    p.add_argument("--no-auth", action="store_true",
                   help="no API token: any local user or process may request completions")
    add_opt_in_arg(p)
    p.add_argument("--client-only", action="store_true",
                   help="complete with the client's blocks alone, the middle skipped: no cloud is started or "
                        "contacted, nothing is sent anywhere (env UMBRA_LOCAL_CLIENT_ONLY=true)")
    p.set_defaults(func=run)


def run(args) -> int:
    from pydantic import ValidationError as SettingsError

    from lsp.http_app import run as serve
    from lsp.settings import LocalSettings
    from umbra.errors import ConfigError
    from umbra.listen import error_detail

    overrides = {field: getattr(args, flag) for flag, field in _FLAGS.items() if getattr(args, flag) is not None}
    if args.no_auth:
        overrides["auth"] = False
    if args.allow_undefended_remote_cloud:
        overrides["allow_undefended_remote_cloud"] = True
    if args.client_only:
        overrides["client_only"] = True
    try:
        settings = LocalSettings(**overrides)
    except SettingsError as exc:
        raise ConfigError(error_detail(exc.errors())) from None
    return serve(settings)
