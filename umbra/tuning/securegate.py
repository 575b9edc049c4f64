"""One organization's SecureGate adapters, end to end (seed 003 Alg. 1 without the federation):

    files = read_org_code([Path("src/")])                          # [(path, text)]
    result = await train_organization(model, middle, files, Scrubber(ScrubConfig(...)), OrgTrainConfig())
    add_adapter(bundle, result.secure, role="secure")              # plaintext: trained on scrubbed code
    key = add_revealing_adapter(bundle, result.revealing, "team-a", store)   # sealed; key shown once

Steps: the files are split by a hash of their paths into training files and a held-out query set
Q (`query_fraction`); the scrubbed view (umbra.scrub: secrets, e-mails, IPs, internal hosts and
URLs, names → typed placeholders) and the raw view of the training files train the secure and
the revealing LoRA (dual_adapters.py, decoder placement); then each is fused with the global
secure adapter (eqs. 6 and 8, fusion.py), the weights fitted on Q under an L1 penalty (eq. 7):
α on the scrubbed query set, β on the raw one (the revealing adapter is for the raw code).

With `global_adapter` (the federation's Δw^T: `umbra federation join --global-out`, then
`umbra securegate train --global`) eqs. 6 and 8 fuse it with this organization's secure and
revealing adapters. Without it the global secure adapter IS this organization's secure adapter, so
eq. 6 degenerates to a scaling (α1 + α2)·Δw_sec, which the fit still chooses on Q; eq. 8 mixes the
organization's secure and revealing adapters. Nothing here writes a file: storing (the revealing
adapter only sealed) is the caller's."""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from umbra.errors import ConfigError
from umbra.middle.protocol import Middle
from umbra.model.adapters.modules import LoraAdapter
from umbra.scrub import Scrubber
from umbra.tuning.dual_adapters import DualAdapterConfig, train_dual
from umbra.tuning.fusion import FusionConfig, fit_fusion_weights, fuse_lora

SOURCE_SUFFIXES = (".py", ".pyi", ".go", ".java", ".js", ".ts", ".tsx", ".jsx", ".rs", ".c", ".h", ".cc", ".cpp",
                   ".hpp", ".cs", ".kt", ".scala", ".rb", ".php", ".sh", ".yaml", ".yml", ".toml", ".ini", ".cfg",
                   ".json", ".properties", ".xml", ".sql")


@dataclass
class OrgTrainConfig:
    adapters: DualAdapterConfig = field(default_factory=DualAdapterConfig)  # both LoRAs (dual_adapters.py)
    fusion: FusionConfig = field(default_factory=FusionConfig)  # eq. 7's optimizer
    psi: float = 1e-3  # ψ, eq. 7's L1 strength on the fusion weights
    query_fraction: float = 0.1  # share of files held out as the query set Q (by a hash of the path)
    secure_name: str = "secure"  # the fused secure adapter's name in the bundle
    revealing_name: str = "revealing"  # the fused revealing adapter's name in the bundle

    def validate(self) -> None:
        if not 0 < self.query_fraction < 1:
            raise ConfigError(f"query_fraction must be in (0, 1), got {self.query_fraction}")
        if self.psi < 0:
            raise ConfigError(f"psi must be >= 0, got {self.psi}")
        if self.secure_name == self.revealing_name:
            raise ConfigError("the secure and the revealing adapter need different names")


@dataclass
class OrgAdapters:
    secure: LoraAdapter  # eq. 6: α1·global + α2·secure (plaintext is fine: trained on scrubbed code)
    revealing: LoraAdapter  # eq. 8: β1·global + β2·revealing (to be sealed under an access key)
    report: dict  # files, findings per kind, fusion weights, losses, seconds (no code, no secret)


def split_query(files: list[tuple[str, str]], fraction: float) -> tuple[list, list]:
    """(training files, query files): the query set is the round(fraction·N) files (at least one,
    and never all) first in a stable hash order of their paths."""
    if len(files) < 2:
        raise ConfigError(f"SecureGate needs at least 2 files (training and a held-out query set), got {len(files)}")
    order = sorted(files, key=lambda f: hashlib.sha256(b"umbra/securegate/query\x00" + f[0].encode()).digest())
    k = min(len(files) - 1, max(1, round(fraction * len(files))))
    query = {p for p, _ in order[:k]}
    return [f for f in files if f[0] not in query], [f for f in files if f[0] in query]


def read_org_code(paths: list[Path]) -> list[tuple[str, str]]:
    """(path, text) of an organization's code: source files under directories (by suffix), single
    files, and `.jsonl` files of {"path", "text"} records (the corpus format). Sorted by path."""
    out: dict[str, str] = {}
    for root in paths:
        root = Path(root)
        if not root.exists():
            raise ConfigError(f"{root} does not exist")
        if root.is_file() and root.suffix == ".jsonl":
            for n, line in enumerate(root.read_text(encoding="utf-8").splitlines(), 1):
                try:
                    rec = json.loads(line)
                    out[f"{root}:{rec['path']}"] = str(rec["text"])
                except (ValueError, KeyError, TypeError) as exc:
                    raise ConfigError(f"{root}:{n} is not a {{\"path\", \"text\"}} record") from exc
            continue
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file()
                                                     and p.suffix.lower() in SOURCE_SUFFIXES)
        for f in files:
            try:
                out[str(f)] = f.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue  # binary or another encoding: not code we train on
    if not out:
        raise ConfigError(f"no code found under {', '.join(map(str, paths))}")
    return sorted(out.items())


async def train_organization(model, middle: Middle, files: list[tuple[str, str]], scrubber: Scrubber,
                             config: OrgTrainConfig | None = None,
                             query: list[tuple[str, str]] | None = None,
                             global_adapter: LoraAdapter | None = None) -> OrgAdapters:
    """`query`: the held-out query set Q, if the caller chose it (else `query_fraction` of `files`).
    `global_adapter`: the federation's global secure adapter Δw^T (umbra federation), fused into
    both adapters by eqs. 6 and 8; without it, this organization's own secure adapter stands in."""
    config = config or OrgTrainConfig()
    config.validate()
    t0 = time.perf_counter()
    if query is None:
        train, query = split_query(files, config.query_fraction)
    else:
        train, query = list(files), list(query)
        if not train or not query:
            raise ConfigError("SecureGate needs training files and a non-empty query set")
        files = train + query
    findings: dict[str, int] = {}
    scrubbed = {}
    for path, text in files:
        result = scrubber.scrub(text, path)
        scrubbed[path] = result.text
        for kind, n in result.counts().items():
            findings[kind] = findings.get(kind, 0) + n
    secure, revealing, dual_report = await train_dual(model, middle, [t for _, t in train],
                                                      [scrubbed[p] for p, _ in train], config.adapters)
    global_ = secure if global_adapter is None else global_adapter  # alone: the organization's own
    alpha = await fit_fusion_weights(model, middle, [scrubbed[p] for p, _ in query], global_, secure,
                                     config.psi, config.fusion)
    beta = await fit_fusion_weights(model, middle, [t for _, t in query], global_, revealing, config.psi, config.fusion)
    report = {
        "files": len(files), "train_files": len(train), "query_files": len(query), "scrub_findings": findings,
        "alpha": list(alpha.weights), "beta": list(beta.weights), "query_loss": {"secure": alpha.loss,
                                                                                  "revealing": beta.loss},
        "secure": _adapter_report(dual_report.secure), "revealing": _adapter_report(dual_report.revealing),
        "global": ("this organization's secure adapter (no federation)" if global_adapter is None
                   else "the federation's global secure adapter"), "psi": config.psi,
        "seconds": round(time.perf_counter() - t0, 1),
    }
    return OrgAdapters(fuse_lora(global_, secure, *alpha.weights, name=config.secure_name),
                       fuse_lora(global_, revealing, *beta.weights, name=config.revealing_name), report)


def _adapter_report(r) -> dict:
    return {"texts": r.texts, "tokens": r.tokens, "steps": r.steps, "epochs": r.epochs,
            "final_loss": r.epoch_losses[-1] if r.epoch_losses else None,
            "seconds": round(r.trunk_seconds + r.train_seconds, 1)}
