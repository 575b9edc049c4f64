"""Cross-domain membership inference (seed 000 App. C.4) for experiments/noesis.py --table mia.

The attacker holds the parameters routed to one language (via: the shared parameters and via's
expert) and asks whether a document of another language (target) was in training. Since via's
expert never saw target's documents, whatever separates members from non-members came through
the shared parameters — the DP ones in NOESIS.

Members: target's training documents of at most MAX_DOC_TOKENS tokens (the first ATTACK_DOCS of
the rows' fixed subset). Non-members: as many documents of target's training split, as short, that
no row trains on — the same projects and the same lengths, so neither topic nor length separates
them. Each document is scored whole (table "mia-doc"): stage 1 trains on one random window per
visit, so a member's trained tokens may lie anywhere in it. Why short documents: at the budget's 2
expected passes of 128-token windows, a 1,024-token member had a quarter of its tokens in a trained
window (in expectation), a median one (~1,200) less, a long one almost none. Two scores:
- calibrated (the attack reported): the document's mean log-likelihood per token under the model
  minus that under the public base model — the difficulty calibration of Watson et al. (2022),
  which the attacker can always run, since the base is public;
- raw: the mean log-likelihood alone (seed 000's score), kept for comparison.

Models (MODELS): the negative control — Share Nothing, via's expert alone, which never saw a
document of target, so any AUC it shows is the two fixed sets' own difference under the expert's
generic shift on target's language (the floor every other row is read against); NOESIS (pt32 at
ε = 1 + experts), the same non-private, and the positive control —
a non-private Mix-LoRA whose shared part is a common LoRA of rank 64 (seed 000 App. C.2.1), the
shared parameters with the capacity to memorize — each at the tables' budget; and the control and
NOESIS trained for LONG_EPOCHS stage-1 epochs (the paper's twelve), NOESIS still at ε = 1: the
attack must be clearly above chance on some control, or its failure on NOESIS would mean nothing.

The first version of this attack (table "mia", rows kept in the results) scored only the block at
each document's middle, on documents of any length: every model, the control included, was at
chance there.

Fresh members (table "mia-fresh", FRESH_MODELS only): "mia-doc"'s members are the tables' fixed
training subset, the same documents at every seed, so whatever the two sets happen to differ in is
a floor no seed averages away (Go's 67 short members give the share-nothing floor 56-59 %). Here
each seed trains its rows on its own draw of as many training documents (`Bench(draw=seed)`), so
members and non-members are drawn afresh per seed and the seeds are replicates of the draw too."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from experiments.noesis_cells import EXPERTS, ran_where

from umbra.data.corpus import LANGS
from umbra.evaluation.doc_scores import DocScores
from umbra.evaluation.membership import auc, membership_result, roc_curve, write_roc_svg
from umbra.tuning.doc_blocks import DocumentBlocks

TABLE = "mia-doc"
FRESH_TABLE = "mia-fresh"  # members drawn afresh per seed (Bench(draw=seed))
ATTACK_DOCS = 300  # at most this many members per target language (and as many non-members)
MAX_DOC_TOKENS = 1024  # members and non-members: documents of at most this many tokens (EOS included)
LONG_EPOCHS = 12.0  # stage-1 epochs of the longer-trained rows (seed 000 C.3 trains twelve)


def long_epochs(budget) -> float:
    """The longer-trained rows' stage-1 epochs under `budget` (LONG_EPOCHS unless it says otherwise)."""
    return LONG_EPOCHS if budget.long_epochs is None else budget.long_epochs


@dataclass(frozen=True)
class Attacked:
    """One attacked model: its stage 1 (family, ε, shape, epochs; None = the budget's; family None:
    no stage 1, the experts alone) and the cache name of the experts trained beside it."""

    family: str | None
    epsilon: float
    shape: dict
    experts: str  # experts' cache name, "{seed}" filled in
    epochs: float | None = None


MODELS = {  # in the order they run: the controls first (the sets' floor, the attack's power), then NOESIS
    "share_nothing": Attacked(None, math.inf, {}, EXPERTS["share_nothing"]),  # Table 2's Share Nothing experts
    "mixlora_rc64_nonprivate": Attacked("lora", math.inf, {"rank": 64}, "mix-rc64-inf-s{seed}"),
    "mixlora_rc64_nonprivate_12ep": Attacked("lora", math.inf, {"rank": 64}, "mix-rc64-inf-ep12-s{seed}",
                                             LONG_EPOCHS),
    "noesis_12ep": Attacked("soft_prompt", 1.0, {"prompt_length": 32}, EXPERTS["noesis_12ep"], LONG_EPOCHS),
    "noesis": Attacked("soft_prompt", 1.0, {"prompt_length": 32}, EXPERTS["noesis"]),
    "noesis_nonprivate": Attacked("soft_prompt", math.inf, {"prompt_length": 32}, EXPERTS["noesis_nonprivate"]),
}
# what the fresh-members table trains per draw: the floor, the control the attack finds, and NOESIS
FRESH_MODELS = ("share_nothing", "mixlora_rc64_nonprivate_12ep", "noesis_12ep")


async def _model(bench, name: str, seed: int):
    """(shared parameters, none for the experts alone; the experts by language)."""
    m = MODELS[name]
    epochs = long_epochs(bench.budget) if m.epochs == LONG_EPOCHS else m.epochs  # the longer-trained rows
    shared = () if m.family is None else ((await bench.shared(m.family, m.epsilon, seed, epochs=epochs, **m.shape))[0],)
    return shared, await bench.experts(m.experts.format(seed=seed), shared, seed)


class WholeDocuments:
    """A set of documents (tokenized: DocumentBlocks) as tiles, and their scores summed back per document."""

    def __init__(self, blocks: DocumentBlocks):
        self.count = len(blocks)
        self.tiles, self.doc = blocks.tiles()

    async def scores(self, bench, adapters) -> DocScores:
        return (await bench.scores(self.tiles, adapters)).grouped(self.doc, self.count)


def short(bench, docs) -> DocumentBlocks:
    """The documents of at most MAX_DOC_TOKENS tokens, tokenized once."""
    blocks = DocumentBlocks(docs, bench.model.tokenizer, bench.budget.block_len)
    return blocks.select([i for i, n in enumerate(blocks.lengths) if n <= MAX_DOC_TOKENS])


def attack_sets(bench) -> dict[str, tuple[WholeDocuments, WholeDocuments]]:
    """Per target language: (members, non-members), equal in number, all short."""
    out = {}
    for lang in LANGS:
        members, nonmembers = short(bench, bench.train[lang]), short(bench, bench.unused[lang])
        k = min(ATTACK_DOCS, len(members), len(nonmembers))
        out[lang] = (WholeDocuments(members.select(range(k))), WholeDocuments(nonmembers.select(range(k))))
    return out


def scores_path(out: Path, name: str, seed: int, budget_key: str, table: str = TABLE) -> Path:
    return out / f"{table}-scores" / f"{name}-s{seed}-{budget_key}.npz"


async def attack(bench, results, seed: int, table: str = TABLE, models=tuple(MODELS)) -> None:
    """Every (target, via) pair of every model of `models` not done yet in `table`; the calibrated
    scores are kept in OUT/<table>-scores/<model>-s<seed>-<budget>.npz (pair by pair, so a resumed
    run keeps them), from which --write draws the ROC plots. The base model's scores are kept there
    too. For FRESH_TABLE, `bench` is the seed's draw (Bench(draw=seed))."""
    sets = attack_sets(bench)
    key = bench.budget.key()
    base = _Kept(scores_path(bench.out, "base", seed, key, table))  # the public base model's: the calibration
    for name in models:
        pairs = [(t, v) for t in LANGS for v in LANGS if v != t and not results.done(table, f"{name}:{t}<-{v}", seed)]
        if not pairs:
            continue
        shared, experts = await _model(bench, name, seed)
        kept = _Kept(scores_path(bench.out, name, seed, key, table))
        for target, via in pairs:
            members, nonmembers = sets[target]
            calibration = [await base.get(f"{target}:{part}", lambda s=s: s.scores(bench, ()))
                           for part, s in (("members", members), ("nonmembers", nonmembers))]
            raw = [(await s.scores(bench, (*shared, experts[via]))).log_likelihood for s in (members, nonmembers)]
            m, n = raw[0] - calibration[0], raw[1] - calibration[1]
            r = membership_result(m, n, seed=seed)
            kept.put({f"{target}<-{via}:members": m, f"{target}<-{via}:nonmembers": n})
            results.add({"table": table, "row": f"{name}:{target}<-{via}", "seed": seed, "auc": r.auc,
                         "auc_ci": list(r.auc_ci), "tpr_at_1pct": r.tpr_at_1pct, "tpr_ci": list(r.tpr_ci),
                         "raw_auc": auc(raw[0], raw[1]), "members": r.members, "nonmembers": r.nonmembers,
                         "tiles": [len(members.doc), len(nonmembers.doc)], "budget": key, **ran_where(bench.device)})


class _Kept:
    """Named score arrays in one .npz, rewritten as entries are added."""

    def __init__(self, path: Path):
        self.path = path
        self.arrays = dict(np.load(path)) if path.exists() else {}

    def put(self, arrays: dict) -> None:
        self.arrays.update(arrays)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(self.path, **self.arrays)

    async def get(self, name: str, compute) -> np.ndarray:
        """The kept log-likelihoods under `name`, or those of `await compute()` (DocScores), kept."""
        if name not in self.arrays:
            self.put({name: (await compute()).log_likelihood})
        return self.arrays[name]


def plot_name(name: str, seed: int, table: str = TABLE) -> str:
    """roc-<model>-s<seed>.svg; the fresh-members table's: roc-fresh-<model>-s<seed>.svg."""
    return f"roc-{'fresh-' if table == FRESH_TABLE else ''}{name}-s{seed}.svg"


def write_plots(out: Path, plots: Path, seeds, budget_key: str, table: str = TABLE) -> list[Path]:
    """One ROC plot per (model, seed) whose scores were kept: plots/<plot_name>."""
    written = []
    fresh = " (members drawn afresh)" if table == FRESH_TABLE else ""
    for name in MODELS:
        for seed in seeds:
            path = scores_path(out, name, seed, budget_key, table)
            if not path.exists():
                continue
            kept = np.load(path)
            pairs = sorted({k.split(":")[0] for k in kept.files})
            curves = {p.replace("<-", " ← "): roc_curve(kept[f"{p}:members"], kept[f"{p}:nonmembers"]) for p in pairs}
            written.append(write_roc_svg(curves, plots / plot_name(name, seed, table),
                                         f"{name}, seed {seed}: cross-domain MIA, whole documents (calibrated){fresh}"))
    return written
