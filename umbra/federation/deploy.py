"""Command lines and files for a real federation (`umbra federation serve|join`, the tests):
Flower's SuperLink, SuperNodes and `flwr run`, from the environment that has the `federation`
extra (`.venv-federation`, scripts/federation_env.sh). Torch- and flwr-free: the CLI parser
imports it.

    app = write_app(workdir / "app", RunSettings(model="models/umbra-code-tiny", rounds=3))
    home = write_flower_home(workdir / "home", "127.0.0.1:9092", insecure=True)
    superlink_cmd(9092, insecure=True) / supernode_cmd("127.0.0.1:9092", 9101, node_config, insecure=True)
    run_cmd(app)           # with FLWR_HOME=home in its environment

TLS: the SuperLink serves with `--ssl-certfile/--ssl-keyfile/--ssl-ca-certfile`; SuperNodes and
`flwr run` verify it with the CA certificate (`--root-certificates`, `root-certificates` in the
Flower config). Node authentication: the SuperLink with `--enable-supernode-auth` admits only
SuperNodes whose public key was registered (`flwr supernode register KEY.pub`), each started with
`--auth-supernode-private-key/--auth-supernode-public-key` (ECDSA keys, e.g. `ssh-keygen -t ecdsa
-b 384`). `insecure=True` is for loopback tests only."""

from __future__ import annotations

import os
import shutil
import socket
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from umbra.errors import ConfigError

FLOWER_NAME = "umbra"  # the connection's name in the Flower config


@dataclass(frozen=True)
class RunSettings:
    model: str  # the public base model directory (the server shapes Δw^0 from it)
    rounds: int = 3  # T, communication rounds
    min_nodes: int = 3  # organizations a round waits for
    node_wait: float = 300.0  # seconds a round waits for min_nodes before it is skipped
    round_timeout: float = 1800.0  # seconds a round waits for the replies (then aggregates those in)
    momentum: float = 0.5  # m, eqs. 4-5 (seed 003 App. A)
    server_lr: float = 0.5  # η, the server rate (< 1: at 1 the momentum cancels; 1 with m = 0: plain FedAvg)
    rank: int = 8  # LoRA rank of the secure adapter (the same at every organization)
    lr: float = 2e-3  # local AdamW rate (dual_adapters.py's default for this model size)
    epochs: int = 1  # local passes over the scrubbed view per round (K)
    block_len: int = 256  # tokens per training block
    batch_size: int = 8  # blocks per optimizer step
    fim_rate: float = 0.5  # share of FIM examples in the view
    seed: int = 0  # LoRA init, FIM draws; batch order is seed + round
    record_dir: str = ""  # where the ServerApp describes every message it receives ("" none)
    out: str = ""  # the final global adapter's .npz ("" none)

    def validate(self) -> "RunSettings":
        if self.rounds < 1 or self.min_nodes < 1 or self.rank < 1 or self.epochs < 1:
            raise ConfigError("rounds, min_nodes, rank and epochs must be >= 1")
        if not (self.node_wait > 0 and self.round_timeout > 0):
            raise ConfigError("node_wait and round_timeout must be > 0")
        return self

    def run_config(self) -> dict:
        return {k.replace("_", "-"): v for k, v in asdict(self).items()}


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    s = str(v)
    if any(c in s for c in '"\\\n'):
        raise ConfigError(f"value {s!r} cannot be passed to Flower (quote, backslash or newline)")
    return f'"{s}"'


def write_app(directory: Path, settings: RunSettings) -> Path:
    """A Flower app directory (pyproject.toml only: the apps are umbra.federation's modules)."""
    settings.validate()
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    config = "\n".join(f"{k} = {_toml_value(v)}" for k, v in settings.run_config().items())
    (directory / "pyproject.toml").write_text(f"""[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "umbra-federation"
version = "1.0.0"
description = "Umbra: federated SecureGate secure adapters"
dependencies = []

[tool.flwr.app]
publisher = "umbra"

[tool.flwr.app.components]
serverapp = "umbra.federation.server_app:app"
clientapp = "umbra.federation.client_app:app"

[tool.flwr.app.config]
{config}
""", encoding="utf-8")
    return directory


def write_flower_home(home: Path, address: str, *, insecure: bool = False,
                      root_certificates: Path | None = None) -> Path:
    """A Flower config dir (FLWR_HOME) whose default connection is the SuperLink at `address`."""
    if insecure == (root_certificates is not None):
        raise ConfigError("give the SuperLink's CA certificate, or insecure for a loopback test (not both)")
    home = Path(home)
    home.mkdir(parents=True, exist_ok=True)
    tls = "insecure = true" if insecure else f"root-certificates = {_toml_value(Path(root_certificates).resolve())}"
    (home / "config.toml").write_text(f"""[superlink]
default = "{FLOWER_NAME}"

[superlink.{FLOWER_NAME}]
address = {_toml_value(address)}
{tls}
""", encoding="utf-8")
    return home


def flower_bin(name: str) -> str:
    """A Flower executable of this environment (beside this Python, else on PATH)."""
    here = Path(sys.executable).parent / name
    if here.exists():
        return str(here)
    found = shutil.which(name)
    if found is None:
        raise ConfigError(f"{name} not found: the federation needs the `federation` extra (Flower), installed "
                          "by scripts/federation_env.sh into .venv-federation; run umbra from there "
                          "(.venv-federation/bin/python -m umbra.cli.main federation ...)")
    return found


def superlink_cmd(port: int, *, host: str = "127.0.0.1", insecure: bool = False, certfile: Path | None = None,
                  keyfile: Path | None = None, ca_certfile: Path | None = None,
                  supernode_auth: bool = False, database: Path | None = None) -> list[str]:
    cmd = [flower_bin("flower-superlink"), "--host", host, "--port", str(port),
           "--disable-runtime-dependency-installation"]  # the apps are installed, never fetched
    if insecure:
        cmd.append("--insecure")
    else:
        if not (certfile and keyfile and ca_certfile):
            raise ConfigError("a SuperLink with TLS needs --ssl-certfile, --ssl-keyfile and --ssl-ca-certfile "
                              "(or --insecure on loopback)")
        cmd += ["--ssl-certfile", str(certfile), "--ssl-keyfile", str(keyfile), "--ssl-ca-certfile", str(ca_certfile)]
    if supernode_auth:
        cmd.append("--enable-supernode-auth")
    if database is not None:
        cmd += ["--database", str(database)]
    return cmd


def node_config_arg(config: dict) -> str:
    return " ".join(f"{k}={_toml_value(v)}" for k, v in config.items())


def supernode_cmd(superlink: str, port: int, node_config: dict, *, insecure: bool = False,
                  root_certificates: Path | None = None, auth_private_key: Path | None = None,
                  auth_public_key: Path | None = None) -> list[str]:
    """A SuperNode for one organization; `port` is its local ClientApp API (loopback only). It keeps
    retrying to reach the SuperLink (Flower's default), so organizations may join before it is up."""
    cmd = [flower_bin("flower-supernode"), "--superlink", superlink, "--port", str(port),
           "--node-config", node_config_arg(node_config)]
    if insecure == (root_certificates is not None):
        raise ConfigError("give the SuperLink's CA certificate (--root-certificates), or --insecure on loopback")
    cmd += ["--insecure"] if insecure else ["--root-certificates", str(root_certificates)]
    if (auth_private_key is None) != (auth_public_key is None):
        raise ConfigError("node authentication needs both --auth-private-key and --auth-public-key")
    if auth_private_key is not None:
        cmd += ["--auth-supernode-private-key", str(auth_private_key),
                "--auth-supernode-public-key", str(auth_public_key)]
    return cmd


def run_cmd(app: Path) -> list[str]:
    """`flwr run` of the app on the default connection of FLWR_HOME, streaming the logs."""
    return [flower_bin("flwr"), "run", str(app), FLOWER_NAME, "--stream"]


def superlink_address(url: str) -> str:
    """host:port from `host:port` or `http(s)://host:port`."""
    for prefix in ("https://", "http://", "grpc://"):
        if url.startswith(prefix):
            url = url[len(prefix):]
    url = url.rstrip("/")
    host, sep, port = url.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ConfigError(f"a SuperLink address is HOST:PORT, got {url!r}")
    return url


def wait_port(host: str, port: int, timeout: float = 30.0, alive=lambda: True) -> None:
    """Return once something listens on host:port (ConfigError after `timeout` or if not alive())."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive():
            raise ConfigError(f"the process meant to listen on {host}:{port} exited")
        with socket.socket() as s:
            s.settimeout(0.5)
            if s.connect_ex((host, port)) == 0:
                return
        time.sleep(0.2)
    raise ConfigError(f"nothing listens on {host}:{port} after {timeout:.0f} s")


def flower_env(home: Path | None) -> dict:
    """The environment of a Flower process: FLWR_HOME (Flower's default ~/.flwr when None), and
    Flower's own executables first on PATH (the SuperLink and SuperNode start `flower-superexec`,
    `flwr-serverapp`, `flwr-clientapp`)."""
    bin_dir = str(Path(flower_bin("flwr")).parent)
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}
    if home is not None:
        env["FLWR_HOME"] = str(Path(home).resolve())
    return env
