"""Run the attack suite on the client's own recorded traffic.

Recordings are grouped by the base model and split they were sent with (the cloud's public
model); each group is attacked as one transcript — a curious cloud pools everything it ever
received, which is what frequency analysis feeds on — and the per-sequence results are mapped
back to the recordings (one recording = one `umbra complete` or one editor request).

Besides the suite, every group gets the decipherment attack (bigram decipherment of the state
clusters, umbra/attacks/decipher.py) and whatever `adaptive(public, facts, suite, sequences)`
returns — `umbra audit` passes the shadow client built from the bundle's configuration and, with
the bundle at hand, the oracle probe (umbra/attack_grid/shadow_audit.py; this package sits below
the tuning loop, so it takes them as a callable)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from umbra.attacks.decipher import DecipherConfig
from umbra.attacks.metrics import AttackScore, aggregate, text_score
from umbra.attacks.public import CorpusSample, PublicModel
from umbra.attacks.suite import DECIPHER, NOISE_AWARE, AttackSuite, SuiteConfig, SuiteResult
from umbra.attacks.transcript import ObservedSequence
from umbra.audit.config import AuditConfig
from umbra.audit.store import AuditRecord, AuditStore
from umbra.errors import ConfigError
from umbra.model.parts import SplitPlan
from umbra.privacy.indvocab import guess_bound


@dataclass
class RequestResult:
    record: AuditRecord
    first: int  # index of the record's first sequence in its group's SuiteResult
    scores: dict[str, AttackScore]  # attack -> this record's score


@dataclass
class GroupResult:
    facts: dict  # model_dir, split, epsilon, defences (from the first recording of the group)
    suite: SuiteResult  # pooled over the group's traffic
    requests: list[RequestResult]
    public: PublicModel
    guess_bound: float
    positions: int  # fresh positions the cloud received
    notes: dict[str, str] = field(default_factory=dict)  # attack -> why it did not run / how it ran


# (public model, the group's facts, its suite, its sequences) -> ({name: attack}, {name: note})
Adaptive = Callable[[PublicModel, dict, AttackSuite, list[ObservedSequence]], tuple[dict, dict]]


def _group_key(record: AuditRecord, override: Path | None) -> tuple:
    m = record.meta
    return (str(override or m["model_dir"]), m["encoder_blocks"], m["decoder_blocks"], str(m.get("epsilon")),
            m.get("indvocab"), m.get("ltokenizer"), m.get("bundle_id"))


def run_audit(store: AuditStore, config: AuditConfig = AuditConfig(), progress=None,
              adaptive: Adaptive | None = None) -> list[GroupResult]:
    records = store.records()
    if config.last is not None:
        records = records[-config.last :]
    if not records:
        raise ConfigError(f"no audit recordings in {store.dir}; turn auditing on (`umbra audit on`) and complete "
                          f"something first")
    groups: dict[tuple, list[AuditRecord]] = {}
    for r in records:
        groups.setdefault(_group_key(r, config.model_dir), []).append(r)
    cache = config.cache_dir or store.dir / "cache"
    out = []
    for key, recs in groups.items():
        facts = dict(recs[0].meta)
        model_dir = Path(key[0])
        public = PublicModel(model_dir, SplitPlan(facts["encoder_blocks"], facts["decoder_blocks"]))
        if public.spec.hidden_size != facts["hidden_size"]:
            raise ConfigError(f"{model_dir} has hidden size {public.spec.hidden_size}, the recording "
                              f"{facts['hidden_size']}: pass the base model the traffic was sent for (--model)")
        sample = CorpusSample(Path(config.corpus_dir), "train", block_length=config.block_length,
                              blocks=config.public_blocks)
        suite = AttackSuite.build(public, SuiteConfig(corpus=sample, probe=config.probe), cache_dir=cache,
                                  progress=progress)
        sequences = [s for r in recs for s in r.sequences]
        eps = facts.get("epsilon")
        eps = math.inf if eps in (None, "inf") else float(eps)
        extra = {NOISE_AWARE: suite.noise_aware_probe(eps)} if "probe" in suite.attacks and math.isfinite(eps) else {}
        if config.decipher:
            extra[DECIPHER] = suite.decipherment(DecipherConfig(fit_positions=config.decipher_fit_positions))
        notes: dict[str, str] = {}
        if adaptive is not None:
            more, notes = adaptive(public, facts, suite, sequences)
            extra.update(more)
        pooled = suite.run(sequences, extra=extra)
        requests, first = [], 0
        for r in recs:
            requests.append(RequestResult(r, first, _scores(pooled, first, len(r.sequences), suite)))
            first += len(r.sequences)
        facts["model_dir"] = str(model_dir)
        out.append(GroupResult(facts, pooled, requests, public, guess_bound(eps, public.vocab_size),
                               int(sum(s.scored.sum() for s in sequences)), dict(notes)))
    return out


def _scores(pooled: SuiteResult, first: int, n: int, suite: AttackSuite) -> dict[str, AttackScore]:
    """One record's scores, from the pooled run's per-sequence reconstructions."""
    out = {}
    for name in pooled.scores:
        rows = [pooled.reconstructions[i][name] for i in range(first, first + n) if name in pooled.reconstructions[i]]
        if rows:
            out[name] = aggregate(name, [(r[2], r[3]) for r in rows], [text_score(r[0], r[1]) for r in rows],
                                  suite.config.gist)
    return out
