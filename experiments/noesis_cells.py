"""The runs behind experiments/noesis.py: one trained configuration ("cell") at one seed, evaluated
per language, through the product's own code (umbra/tuning/noesis.py, the embedded default model,
the middle in-process). Trained adapters are kept under OUT/adapters so later cells reuse them (the
NOESIS row is Prompt-Tuning Only's stage 1 plus experts; the ablation and the attack reuse NOESIS).

Budgets are identical across rows (Budget below): the same documents, the same block of document
tokens, the same stage-1 sampling rate and steps for every DP row, the same stage-2 epochs for
every expert. Each shared family has its own AdamW rate (FAMILY_LR) and clip bound (the product's
`family_clip_norm`): one choice per family, the same at every ε."""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
from experiments.stripped_form import stripped

from umbra.data.corpus import LANGS, Document, read_documents
from umbra.engine import ClientModel
from umbra.evaluation.doc_scores import DocScores, doc_scores
from umbra.middle.local import LocalMiddle
from umbra.model.adapters.files import read_adapter, save_adapter
from umbra.model.adapters.modules import Adapter
from umbra.tuning.adapter_config import AdapterTrainConfig
from umbra.tuning.doc_blocks import DocumentBlocks
from umbra.tuning.dp_sgd import plan_run
from umbra.tuning.noesis import train_experts, train_shared
from umbra.tuning.noesis_config import DEFAULT_CLIP_NORM, DPConfig, SharedConfig, StageOneConfig, family_clip_norm

# The experts' cache names (under OUT/adapters, "{seed}" filled in) of the rows that several tables and
# the membership attack train once and share: one name per configuration, or a cell retrains them.
EXPERTS = {"share_nothing": "sn-s{seed}", "noesis": "noesis-s{seed}", "noesis_nonprivate": "noesis-inf-s{seed}",
           "noesis_12ep": "noesis-ep12-s{seed}", "noesis_nonprivate_12ep": "noesis-inf-ep12-s{seed}"}
# Per-family AdamW learning rates of stage 1 (one choice per family, the same for every ε).
FAMILY_LR = {"soft_prompt": 1e-2, "deep_prompt": 1e-2, "lora": 2e-3, "bottleneck": 2e-3, "full": 2e-4}


@dataclass(frozen=True)
class Budget:
    train_docs: dict = field(default_factory=lambda: {"python": 1500, "java": 600, "go": 150})  # per language (Go 10x scarcer)
    test_docs: int = 200  # per language: one block at the middle of each (past license headers), plain next-token
    block_len: int = 128  # document tokens per block (a soft prompt adds its positions)
    expected_batch: int = 128  # stage 1: B (q = B / N); large B, few steps: noise σC/B per coordinate ~0.014
    epochs: float = 2.0  # stage 1: expected passes
    clip_norm: float = DEFAULT_CLIP_NORM
    delta: float = 1e-6
    physical_batch: int = 8
    expert_rank: int = 16
    expert_epochs: int = 2
    expert_lr: float = 2e-3
    expert_doc_chars: int = 1000  # stage 2: this many characters around each document's middle (~250 tokens)
    form: str = "raw"  # the documents' text: "raw" files, or "stripped" (seed 000's data form: stripped_form.py)
    # stage-1 epochs of the attack's longer-trained rows (None: theirs, the paper's twelve); a
    # pipeline check (--quick) trains them one epoch
    long_epochs: float | None = None

    def key(self) -> str:
        """A hash of the fields; `form` and `long_epochs` count only off their defaults, so the keys
        of the rows recorded before they existed stay what they were."""
        defaults = {"form": "raw", "long_epochs": None}
        fields = {k: v for k, v in asdict(self).items() if not (k in defaults and v == defaults[k])}
        return hashlib.sha256(repr(sorted(fields.items())).encode()).hexdigest()[:10]


# Every training document of the private domains (docs/data.md: 6,549 Python, 2,703 Java, 726 Go),
# Go cut to a tenth of Python's so it stays the scarce language. The expected batch keeps the tables'
# sampling rate (q = 128 / 2,250 = 563 / 9,906), so the accountant gives the same σ for the same ε
# and steps: what 4.4 times the documents buys is the noise per coordinate, σC / B, 4.4 times smaller.
FULL_DOMAINS = Budget(train_docs={"python": 6549, "java": 2703, "go": 654}, expected_batch=563)
# Table 2's budget on the same documents in the form of seed 000's data (stripped and tokenized,
# stripped_form.py): a surface form every language shares and the base model never saw.
STRIPPED = Budget(form="stripped")
# ... and with Go as scarce as in the paper (50 times fewer documents than Python: 30, not 150), the
# expected batch scaled to keep q (121 / 2,130 ≈ 128 / 2,250): can an expert that sees too little of
# the form to learn it take it from the shared prompt?
STRIPPED_SCARCE = Budget(train_docs={"python": 1500, "java": 600, "go": 30}, expected_batch=121, form="stripped")
# ... and Java cut to Go's 30 too (the expected batch 89: q = 89 / 1,560 ≈ 128 / 2,250): does the
# language that gains nothing from 600 documents of its own gain once its expert is starved as Go's?
STRIPPED_SCARCE_JAVA = Budget(train_docs={"python": 1500, "java": 30, "go": 30}, expected_batch=89, form="stripped")
# The tables that rerun Table 2's NOESIS rows and their controls on a budget other than Table 2's.
TABLE_BUDGETS = {"full": FULL_DOMAINS, "stripped": STRIPPED, "stripped-scarce": STRIPPED_SCARCE,
                 "stripped-scarce-java": STRIPPED_SCARCE_JAVA}


def subset(docs: list[Document], k: int | None, draw: int | None = None) -> list[Document]:
    """The first k (all, for None) by a hash of the path: the same for every seed and row, or, with
    `draw`, a hash salted by it (another draw of the same documents: the fresh-members attack's)."""
    salt = b"" if draw is None else f"draw{draw}:".encode()
    return sorted(docs, key=lambda d: hashlib.sha256(salt + d.path.encode()).digest())[:k]


class Bench:
    """The model, middle and data of one benchmark run; cells are its methods."""

    def __init__(self, model_dir: Path, corpus_dir: Path, out: Path, budget: Budget, device: torch.device | None = None,
                 draw: int | None = None):
        """`draw`: which training documents the rows train on — None, the tables' fixed subset; a
        number, another draw of as many (its adapters kept apart, under OUT/adapters-draw<n>)."""
        self.model_dir, self.out, self.budget, self.device = model_dir, out, budget, device
        self.adapters = adapters_dir(out, budget, draw)
        self.model = ClientModel.load(model_dir, device=device)  # the middle follows it (load_middle)
        self.middle = LocalMiddle(self.model.load_middle())
        pool = {lang: subset(_in_form(read_documents(corpus_dir, "train", lang), budget.form), None, draw)
                for lang in LANGS}
        short = {lang: (len(pool[lang]), budget.train_docs[lang]) for lang in LANGS
                 if len(pool[lang]) < budget.train_docs[lang]}
        if short:
            raise ValueError("the corpus has fewer training documents than the budget asks: "
                             + ", ".join(f"{lang} {have} < {want}" for lang, (have, want) in short.items()))
        self.train = {lang: pool[lang][: budget.train_docs[lang]] for lang in LANGS}
        # the training split's documents that no row trains on: the attack's non-members, drawn
        # from the same distribution (the same projects) as the members
        self.unused = {lang: pool[lang][budget.train_docs[lang]:] for lang in LANGS}
        self.test = {lang: subset(_in_form(read_documents(corpus_dir, "test", lang), budget.form), budget.test_docs)
                     for lang in LANGS}
        self.adapters.mkdir(parents=True, exist_ok=True)
        self._eval = {lang: self.middle_blocks(self.test[lang]) for lang in LANGS}

    def middle_blocks(self, docs: list[Document]):
        """The block at the middle of each document: what accuracy and the attack score."""
        return DocumentBlocks(docs, self.model.tokenizer, self.budget.block_len).eval_blocks(position=0.5)

    # -- evaluation ------------------------------------------------------------------------------
    async def scores(self, docs_blocks, adapters: tuple[Adapter, ...], model=None) -> DocScores:
        return await doc_scores(model or self.model, self.middle, docs_blocks.ids, docs_blocks.mask, adapters)

    async def accuracy(self, routed: dict[str, tuple[Adapter, ...]], model=None) -> dict[str, float]:
        """Top-1 next-token accuracy (%) on each language's test blocks, with that language's adapters."""
        out = {}
        for lang in LANGS:
            s = await self.scores(self._eval[lang], routed.get(lang, ()), model)
            out[lang] = 100.0 * s.accuracy
        return out

    # -- training --------------------------------------------------------------------------------
    def stage_one(self, family: str, epsilon: float, seed: int, epochs: float | None = None,
                  **shared) -> StageOneConfig:
        return stage_one_config(self.budget, family, epsilon, seed, epochs, **shared)

    async def shared(self, family: str, epsilon: float, seed: int, langs=LANGS, model=None,
                     epochs: float | None = None, **shared) -> tuple[Adapter | None, dict]:
        """Stage 1 on the training documents of `langs`: (adapter, facts). Adapters are cached under
        one name per configuration, so every table that uses a configuration shares its run.
        `epochs` departs from the budget's (the attack's longer-trained rows only)."""
        config = self.stage_one(family, epsilon, seed, epochs, **shared)
        name = shared_name(config.shared, epsilon, seed, langs, epochs, config.dp.clip_norm, self.budget.clip_norm)
        path = self.adapters / f"{name}.safetensors"
        spec, shape = self.model.spec, self.model.plan.shape(self.model.spec.num_layers)
        docs = [d for lang in langs for d in self.train[lang]]
        if family != "full" and path.exists():
            adapter = read_adapter(path, spec, shape, name=config.shared.name).to(device=self.device)
            count = sum(p.numel() for p in adapter.parameters())
            return adapter, {**_plan_facts(plan_run(config.dp, len(docs)), len(docs), count), "cached": True}
        blocks = DocumentBlocks(docs, self.model.tokenizer, config.block_len, config.fim_rate)
        result = await train_shared(model or self.model, self.middle, blocks, config)
        facts = {**_plan_facts(result.plan, len(docs), result.params.parameter_count), "seconds": round(result.seconds, 1)}
        if result.adapter is not None:
            save_adapter(result.adapter, path, spec, shape)
        return result.adapter, facts

    async def experts(self, name: str, shared: tuple[Adapter, ...], seed: int) -> dict[str, Adapter]:
        """Stage 2 per language beside `shared` (cached by name)."""
        b = self.budget
        spec, shape = self.model.spec, self.model.plan.shape(self.model.spec.num_layers)
        paths = {lang: self.adapters / f"{name}-{lang}.safetensors" for lang in LANGS}
        if all(p.exists() for p in paths.values()):
            return {lang: read_adapter(p, spec, shape, name=f"expert-{lang}").to(device=self.device)
                    for lang, p in paths.items()}
        config = AdapterTrainConfig(rank=b.expert_rank, epochs=b.expert_epochs, lr=b.expert_lr,
                                    block_len=b.block_len, fim_rate=0.5, seed=seed)
        texts = {lang: [middle_text(d.text, b.expert_doc_chars) for d in self.train[lang]] for lang in LANGS}
        trained = await train_experts(self.model, self.middle, texts, shared, config)
        for lang, (adapter, _) in trained.items():
            save_adapter(adapter, paths[lang], spec, shape)
        return {lang: a for lang, (a, _) in trained.items()}

    def fresh_model(self) -> ClientModel:
        """A private copy of the client's weights (the `full` family trains them in place)."""
        return ClientModel.load(self.model_dir, device=self.device)


def _in_form(docs, form: str) -> list[Document]:
    """The documents with their text in `form`; in the stripped form, those left with no code token
    (a file of comments only) are dropped, as they have nothing to predict."""
    if form == "raw":
        return list(docs)
    if form != "stripped":
        raise ValueError(f"unknown document form {form!r}: raw or stripped")
    kept = (replace(d, text=stripped(d.text, d.lang)) for d in docs)
    return [d for d in kept if d.text]


def adapters_dir(out: Path, budget: Budget, draw: int | None = None) -> Path:
    """Where a run keeps its adapters: OUT/adapters for the tables' budget; another budget's (the full
    domains', --quick's) apart, or a cell would reuse a cache trained on other documents; a draw's
    beside its budget's."""
    kept = "adapters" if budget == Budget() else f"adapters-{budget.key()}"
    return out / (kept if draw is None else f"{kept}-draw{draw}")


def stage_one_config(budget: Budget, family: str, epsilon: float, seed: int, epochs: float | None = None,
                     **shared) -> StageOneConfig:
    """Stage 1 of `family` at `epsilon` under `budget` (the family's lr and clip bound)."""
    sc = SharedConfig(family, init_seed=seed, **shared)
    prompt = sc.prompt_length if family == "soft_prompt" else 0
    dp = DPConfig(epsilon, budget.delta, family_clip_norm(family, budget.clip_norm), budget.expected_batch,
                  epochs or budget.epochs, noise_seed=seed)
    return StageOneConfig(sc, dp, context_length=budget.block_len + prompt, physical_batch=budget.physical_batch,
                          lr=FAMILY_LR[family], fim_rate=0.5)


def ran_where(device: torch.device | None) -> dict:
    """What a result row records of the device: nothing on the CPU (rows look as they always did),
    {"device": "cuda"} off it (its numbers differ from a CPU run's in the last bits)."""
    return {"device": device.type} if device is not None and device.type != "cpu" else {}


def shared_name(shared: SharedConfig, epsilon: float, seed: int, langs=LANGS, epochs: float | None = None,
                clip_norm: float = DEFAULT_CLIP_NORM, budget_clip: float = DEFAULT_CLIP_NORM) -> str:
    """pt32-dp-s0 (a 32-vector prompt at ε = 1), rc64-inf-s0, bottleneck-e4-s1, rc64-inf-ep12-s0
    (12 epochs instead of the budget's), dp32-e4-c0.001-s0 (a DP run clipped at C = 10⁻³, not the
    budget's), ...: the cache name."""
    tag = "inf" if math.isinf(epsilon) else "dp" if epsilon == 1.0 else f"e{epsilon:g}"
    shape = {"soft_prompt": f"pt{shared.prompt_length}", "deep_prompt": f"dp{shared.prompt_length}",
             "lora": f"rc{shared.rank}", "bottleneck": f"bn{shared.bottleneck}"}.get(shared.family, shared.family)
    where = "" if tuple(langs) == tuple(LANGS) else "-" + "-".join(langs)
    longer = "" if epochs is None else f"-ep{epochs:g}"
    clip = "" if math.isinf(epsilon) or clip_norm == budget_clip else f"-c{clip_norm:g}"  # non-private: no clipping
    return f"{shape}{where}-{tag}{longer}{clip}-s{seed}"


def middle_text(text: str, chars: int) -> str:
    """About `chars` characters around the text's middle, from a line start (all of a short text)."""
    if len(text) <= chars:
        return text
    start = max(0, len(text) // 2 - chars // 2)
    line = text.rfind("\n", 0, start)
    start = line + 1 if line >= 0 else 0
    return text[start : start + chars]


def _plan_facts(plan, documents: int, parameters: int) -> dict:
    """What a stage-1 run's row reports: its DP plan (a function of the config and the documents,
    so a cached run reports it too), the documents and the shared parameters' count."""
    return {"epsilon_spent": _num(plan.epsilon), "sigma": plan.noise_multiplier, "steps": plan.steps,
            "q": plan.sample_rate, "clip_norm": plan.clip_norm if math.isfinite(plan.epsilon) else None,
            "documents": documents, "parameters": parameters}


def _num(x: float):
    return "inf" if math.isinf(x) else x



