"""The privacy mode in force: what protects a client's traffic, named by one canonical key, and
what the attack tables measured for it (DESIGN invariant 6; docs/privacy/mode.md).

    mode = mode_of(model)                  # a ClientModel: its bundle's ε and STuning record
    mode.summary                           # "NOIR ε=1024 · STuned 300 steps, gradient σ=0.1 · strongest attack 8.0 % (baseline 9.2 %)"
    mode.defended                          # measured with the adaptive attacks, every attack within 1 point of the baseline
    mode.offered                           # defended and completes above the client-blocks-alone control
    mode.details                           # the measured figures as JSON (umbra/status, GET /healthz)

The key (`config_key`) names a client configuration, the same for the product (which reads it
from a bundle's manifest) and for the benchmark that measures it (which computes it from the
configuration it tuned): INDVocab ε (None: no bundle; inf: permutation only), and from the
STuning record `manifest.privacy["stuning"]` — `TuneConfig.trajectory()` plus `cloud_lora`, as
`umbra tune` writes it (`stuning_record`) — the steps, the gradient noise σ, the inversion
penalty λ, whether the embedding was trained, whether the cloud trained a LoRA, and, verbatim
(sorted JSON), the sub-records `private_path` and `adversary` when present and enabled, and
`cloud_backward=false` for forward-only tuning (the default, absent from the record, adds nothing). A
sub-record is enabled when its `"enabled"` entry is true; `stuning_record` writes that entry from
the config's `enabled` property (dataclass properties are not in `asdict`); a sub-record with no
`"enabled"` entry counts as enabled, so an unknown setting never borrows another configuration's
figures. Everything else (learning rate, batch, context, seed) is left out of the key: the
tables measure a configuration's kind, not its run.

The figures measured for each key, per model, are umbra/privacy/measured.py's (package data,
`measured.json`): a mode's figures are those of the model in use (`table_for`, `plain_table`).

Torch-free and pure: the CLI's parser, the servers and the benchmarks import it."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from umbra.errors import ValidationError
from umbra.privacy.measured import Measured, measured_names, measured_table, plain_table, table_for

STUNING_KEY = "stuning"  # the manifest privacy entry (umbra.privacy.bundle.STUNING; that module needs torch)
CLIENT_WEIGHTS_DP_KEY = "client_weights_dp"  # umbra.privacy.bundle.CLIENT_WEIGHTS_DP: NOESIS-tuned client blocks
NOESIS_SUFFIX = ";client_weights=noesis_dp"  # key suffix of a bundle whose blocks NOESIS rewrote
SUBRECORDS = ("private_path", "adversary")  # STuning sub-configs taken into the key verbatim when enabled
OPT_IN_NOTE = "sent undefended by your setting"
OPT_IN_BELOW_NOTE = "sent by your setting"  # a defended mode that is not `offered`


# -- the key ---------------------------------------------------------------------------------
def _num(value: Any) -> str:
    x = float(value)
    if math.isnan(x):
        raise ValidationError("a privacy configuration has no NaN")
    return "inf" if math.isinf(x) else format(x, ".12g")


def _enabled(sub: Any) -> bool:
    return isinstance(sub, Mapping) and bool(sub.get("enabled", True))


def _forward_only(stuning: Mapping) -> bool:
    """Tuned without the cloud's backward (TuneConfig.cloud_backward); the default is absent from records."""
    return stuning.get("cloud_backward", True) is False


def config_key(epsilon: float | None, stuning: Mapping | None) -> str:
    """The canonical, stable name of a client configuration (see the module doc). `epsilon` None:
    no bundle (then `stuning` must be None: only a bundle is STuned)."""
    if epsilon is None:
        if stuning is not None:
            raise ValidationError("a STuning record needs a bundle (an INDVocab ε)")
        return "none"
    key = f"eps={_num(epsilon)}"
    if stuning is None:
        return key
    try:
        parts = [f"steps={int(stuning['steps'])}",
                 f"sigma={_num(stuning.get('gradient_noise', {}).get('noise_multiplier', 0.0))}",
                 f"lambda={_num(stuning.get('inversion_penalty', {}).get('weight', 0.0))}",
                 f"train_embedding={str(bool(stuning.get('train_embedding', False))).lower()}",
                 f"cloud_lora={str(bool(stuning.get('cloud_lora', False))).lower()}"]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValidationError(f"a malformed STuning record ({exc})") from None
    for name in SUBRECORDS:
        sub = stuning.get(name)
        if _enabled(sub):
            parts.append(f"{name}={json.dumps(sub, sort_keys=True, separators=(',', ':'))}")
    if _forward_only(stuning):
        parts.append("cloud_backward=false")
    return f"{key};stuning:{';'.join(parts)}"


def stuning_record(config: Any, cloud_lora: bool) -> dict:
    """What `umbra tune` records in the manifest: `config.trajectory()` (a TuneConfig), `cloud_lora`,
    and for each sub-config of SUBRECORDS with an `enabled` property, that flag in its record."""
    record = dict(config.trajectory())
    record["cloud_lora"] = bool(cloud_lora)
    for name in SUBRECORDS:
        sub = getattr(config, name, None)
        if isinstance(record.get(name), Mapping) and hasattr(sub, "enabled"):
            record[name] = {**record[name], "enabled": bool(sub.enabled)}
    return record


def config_label(epsilon: float | None, stuning: Mapping | None) -> str:
    """A person's name for the configuration: "none", "NOIR ε=1024", "NOIR ε=1024 · STuned 300 steps, gradient σ=0.1"."""
    if epsilon is None:
        return "none"
    label = f"NOIR ε={'∞' if math.isinf(float(epsilon)) else format(float(epsilon), 'g')}"
    if stuning is None:
        return label
    how = [f"STuned {int(stuning['steps'])} steps"]
    sigma = float(stuning.get("gradient_noise", {}).get("noise_multiplier", 0.0))
    weight = float(stuning.get("inversion_penalty", {}).get("weight", 0.0))
    if sigma > 0:
        how.append(f"gradient σ={sigma:g}")
    if weight > 0:
        how.append(f"inversion penalty λ={weight:g}")
    if stuning.get("train_embedding"):
        how.append("embedding trained")
    if stuning.get("cloud_lora"):
        how.append("cloud LoRA")
    how += [name.replace("_", " ") for name in SUBRECORDS if _enabled(stuning.get(name))]
    if _forward_only(stuning):
        how.append("forward only (no gradient sent)")
    return f"{label} · {', '.join(how)}"


# -- the mode --------------------------------------------------------------------------------
@dataclass(frozen=True)
class PrivacyMode:
    key: str
    label: str
    measured: Measured | None = field(default=None, compare=False)
    # Sent to a cloud not on this machine although not `defended`, because the user opted in
    # (umbra/privacy/cloud_policy.py).
    opted_in: bool = False

    @classmethod
    def of(cls, epsilon: float | None, stuning: Mapping | None,
           table: Mapping[str, Measured] | None = None) -> PrivacyMode:
        key = config_key(epsilon, stuning)
        return cls(key, config_label(epsilon, stuning), (measured_table() if table is None else table).get(key))

    @property
    def defended(self) -> bool:
        """Measured, every attack held, and an adaptive attack among them: the per-position attacks
        alone held for every plain NOIR bundle that the decipherment then read (frontier.md)."""
        return self.measured is not None and self.measured.holds and self.measured.adaptive

    @property
    def offered(self) -> bool:
        """Worth sending to a cloud not on this machine without an opt-in (cloud_policy.py):
        defended, and measured to complete above the client-blocks-alone control. A defended mode
        below it gives nothing for the cloud: the client's own blocks alone (client-only mode,
        no cloud at all) complete better (DESIGN.md §5's controls)."""
        return self.defended and self.measured.beats_control  # defended: measured

    @property
    def summary(self) -> str:
        """One line for status bars (see the module doc for examples)."""
        note = OPT_IN_BELOW_NOTE if self.defended else OPT_IN_NOTE
        head = f"{self.label} — {note}" if self.opted_in else self.label
        m = self.measured
        if m is None:
            return f"{head} · not measured"
        name, worst = m.strongest
        if not m.holds:
            return f"{head} · cloud reads ~{worst:.1f} % of tokens"
        if not m.adaptive:
            return f"{head} · per-position attacks held; adaptive attacks not measured"
        if m.below_control:
            return (f"{head} · attacks held; completes below the client-blocks-alone control "
                    f"({m.top1:.1f} % vs {m.client_alone_top1:.1f} %)")
        return f"{head} · strongest attack {worst:.1f} % (baseline {m.baseline:.1f} %)"

    @property
    def header(self) -> str:
        """`summary` in ASCII, for an HTTP header (X-Umbra-Privacy): ε → eps, σ → sigma, λ → lambda."""
        text = self.summary
        for a, b in (("ε=∞", "eps=inf"), ("ε", "eps"), ("σ", "sigma"), ("λ", "lambda"), (" · ", "; "),
                     (" — ", " - "), ("~", "~")):
            text = text.replace(a, b)
        return text.encode("ascii", "replace").decode("ascii")

    @property
    def details(self) -> dict:
        """The mode and its measured figures as JSON (camelCase, percentages). `attacks` is a list of
        {"name", "percent"}: attack names are not identifiers, so they are values, not keys."""
        out: dict[str, Any] = {"key": self.key, "label": self.label, "defended": self.defended,
                               "offered": self.offered, "optedIn": self.opted_in,
                               "measured": self.measured is not None}
        m = self.measured
        if m is not None:
            name, worst = m.strongest
            out.update({"attacks": [{"name": k, "percent": v} for k, v in m.attacks.items()],
                        "strongestAttack": {"name": name, "percent": worst},
                        "baseline": m.baseline, "holds": m.holds, "top1": m.top1,
                        "clientAloneTop1": m.client_alone_top1, "fcleanTop1": m.fclean_top1,
                        "belowControl": m.below_control, "seeds": m.seeds, "adaptive": m.adaptive,
                        "source": m.source})
        return out


def mode_of_manifest(manifest: Any) -> PrivacyMode:
    """The mode of a bundle's Manifest: its ε and its STuning record (None: untuned). Client
    blocks rewritten by NOESIS `--family full` (a DP record, no STuning record) are tuned but not
    by STuning: their key gets NOESIS_SUFFIX, which nothing has measured. A bundle of a base model
    other than the one measured (`measured_model`, by its weights' sha256) has no figures at all:
    it is "not measured", so never `defended`."""
    stuning = manifest.privacy.get(STUNING_KEY)
    split = manifest.split or {}
    found = table_for(manifest.base.get("weights", {}), (split.get("encoder_blocks"), split.get("decoder_blocks")))
    mode = PrivacyMode.of(manifest.epsilon, stuning, {} if found is None else found.table)
    if stuning is None and manifest.privacy.get(CLIENT_WEIGHTS_DP_KEY) is not None:
        key = mode.key + NOESIS_SUFFIX
        mode = PrivacyMode(key, f"{mode.label} · client blocks DP-tuned (NOESIS)",
                           None if found is None else found.table.get(key))
    if found is None:  # figures of one model say nothing of another
        return PrivacyMode(mode.key, f"{mode.label} · base model other than the measured {measured_names()}", None)
    return mode


def mode_of(model: Any) -> PrivacyMode:
    """The mode of a ClientModel: its manifest's with a bundle; else "none", with the figures of
    the model in use where measured (its weight files' sha256), else the first table's."""
    bundle = getattr(model, "bundle", None)
    if bundle is not None:
        return mode_of_manifest(bundle.manifest)
    found = plain_table(getattr(model, "model_dir", None))
    return PrivacyMode.of(None, None, None if found is None else found.table)
