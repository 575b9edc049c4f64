"""A federation's organizations as settings (`umbra federation join`, `simulate`): each one's code,
own domains, optional client bundle and DP choice, and the SuperNode node config they become
(umbra/federation/client_app.py reads it). Torch- and flwr-free: the CLI parser imports it.

    orgs = read_organizations(Path("orgs.json"))       # [{"name": "acme", "data": "acme/", ...}, ...]
    config = orgs["acme"].node_config("models/umbra-code-tiny")
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from umbra.errors import ConfigError

# DP is on unless an organization opts out (dp_epsilon = 0). Scrubbing removes the secrets it
# recognises; what it cannot (codenames, account numbers) the global adapter learns and hands to
# every member, which ε = 8 stopped in docs/securegate.md's measurements ("Federation").
DEFAULT_DP_EPSILON = 8.0


@dataclass(frozen=True)
class OrgSettings:
    """One organization's part of a federation: what `umbra federation join` and `simulate` turn
    into its SuperNode's node config (umbra/federation/client_app.py reads it)."""

    data: tuple[str, ...]  # its code: directories, files or .jsonl of {path, text}
    internal_domains: tuple[str, ...] = ()  # its own domains: their hosts and URLs are scrubbed
    threads: int = 0  # torch threads for training (0: torch's default)
    global_out: str = ""  # keep the final global secure adapter here (.npz; "" none)
    bundle: str = ""  # its client bundle: train on the bundle's private tokenizer ("" none)
    service: str = ""  # the OS keyring service holding the bundle's keys ("": umbra's)
    dp_epsilon: float = DEFAULT_DP_EPSILON  # > 0: document-level DP-SGD at this ε for the whole federation; 0: none
    dp_delta: float = 1e-6  # DP δ, below 1 / files
    dp_clip: float = 1.0  # DP clip bound C per file
    dp_batch: int = 8  # DP expected files per step B

    def check_dp(self, files: int, name: str = "this organization") -> None:
        """Refuse up front a DP setting that `files` files of code cannot meet (the SuperNode would
        fail at its first round): fewer files than the expected batch B, or δ not below 1/N."""
        if not self.dp_epsilon:
            return
        way_out = ("give it more code, a smaller --dp-batch, or --dp-epsilon 0 to train without DP (what the "
                   "scrubber misses then reaches every member)")
        if files < max(1, self.dp_batch):
            raise ConfigError(f"{name} has {files} files of code; DP-SGD at ε = {self.dp_epsilon:g} samples an "
                              f"expected {self.dp_batch} files per step (--dp-batch) and needs at least that many: "
                              f"{way_out}")
        if self.dp_delta >= 1 / files:
            raise ConfigError(f"{name} has {files} files of code; DP's δ = {self.dp_delta:g} must be below 1/{files} "
                              f"(--dp-delta): {way_out}")

    def node_config(self, model: Path | str) -> dict:
        """The SuperNode's --node-config (absolute paths; the DP keys only under DP)."""
        for path in (*self.data, model, *([self.bundle] if self.bundle else [])):
            if not Path(path).exists():
                raise ConfigError(f"{path} does not exist")
        if not self.data:
            raise ConfigError("an organization needs its code (data)")
        if self.dp_epsilon < 0 or self.threads < 0:
            raise ConfigError("dp_epsilon and threads must be >= 0")
        config = {"data": os.pathsep.join(str(Path(p).resolve()) for p in self.data),
                  "model": str(Path(model).resolve()), "internal-domains": ",".join(self.internal_domains),
                  "threads": self.threads, "global-out": str(Path(self.global_out).resolve()) if self.global_out else ""}
        if self.bundle:
            config.update({"bundle": str(Path(self.bundle).resolve()), "keyring-service": self.service})
        if self.dp_epsilon:
            config.update({"dp-epsilon": self.dp_epsilon, "dp-delta": self.dp_delta, "dp-clip": self.dp_clip,
                           "dp-batch": self.dp_batch})
        return config


def read_organizations(path: Path, defaults: OrgSettings | None = None) -> dict[str, OrgSettings]:
    """A federation's organizations from a JSON file: a list of objects, each with `name` and
    `data` (a path or a list of them) and any other OrgSettings field (`internal_domains`, `bundle`,
    `service`, `dp_epsilon`, ...); paths relative to the file. Fields absent take `defaults`'."""
    import json
    from dataclasses import fields

    try:
        entries = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the organizations file {path}: {exc}") from None
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{path}: expected a non-empty JSON list of organizations")
    known = {f.name for f in fields(OrgSettings)}
    here, out = Path(path).resolve().parent, {}
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or "data" not in entry:
            raise ConfigError(f"{path}: organization {i} needs a name and its data")
        name, extra = entry["name"], set(entry) - known - {"name"}
        if extra:
            raise ConfigError(f"{path}: organization {name!r} has unknown fields {sorted(extra)}")
        if name in out:
            raise ConfigError(f"{path}: two organizations are named {name!r}")
        out[name] = _org_entry(path, name, {k: v for k, v in entry.items() if k != "name"}, here, defaults)
    return out


def _org_entry(path: Path, name: str, values: dict, here: Path, defaults: OrgSettings | None) -> OrgSettings:
    from dataclasses import replace

    for key in ("data", "internal_domains"):  # one string or a list of them
        v = values.get(key)
        if key in values and not (isinstance(v, str) or (isinstance(v, list) and all(isinstance(x, str) for x in v))):
            raise ConfigError(f"{path}: organization {name!r}: {key} must be a string or a list of strings")
        if isinstance(v, str):
            values[key] = [v]
    values["data"] = tuple(str(here / p) for p in values["data"])
    if "internal_domains" in values:
        values["internal_domains"] = tuple(values["internal_domains"])
    for key in ("global_out", "bundle", "service"):
        if not isinstance(values.get(key, ""), str):
            raise ConfigError(f"{path}: organization {name!r}: {key} must be a string")
        if key != "service" and values.get(key):
            values[key] = str(here / values[key])
    for key in ("threads", "dp_epsilon", "dp_delta", "dp_clip", "dp_batch"):
        v = values.get(key, 0)
        whole = key in ("threads", "dp_batch")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (whole and v != int(v)):
            raise ConfigError(f"{path}: organization {name!r}: {key} must be a {'whole ' if whole else ''}number")
    return replace(defaults or OrgSettings(data=()), **values)
