"""`umbra eval lm`: next-token accuracy, perplexity and FIM line exact match per language on a
split of the corpus, with the model run monolithically by the project's own blocks (the split
path is token-for-token identical; tests prove that separately)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from umbra.data.corpus import LANGS, corpus_file, read_documents
from umbra.engine import ClientModel, CompletionEngine
from umbra.evaluation.fim_lines import fim_line_exact_match, sample_cases
from umbra.evaluation.next_token import lean_logits_fn, next_token_metrics
from umbra.errors import ConfigError
from umbra.training.packing import eval_blocks, load_raw_tokenizer


@dataclass(frozen=True)
class LmEvalConfig:
    model_dir: Path
    corpus_dir: Path = Path("data/corpus")
    split: str = "test"  # corpus split to evaluate on
    langs: tuple[str, ...] = LANGS
    max_tokens_per_lang: int = 400_000  # next-token metrics over at most this many tokens
    fim_lines: int = 300  # FIM cases per language
    fim_max_tokens: int = 48  # generation cap per FIM case
    seed: int = 0  # FIM line sampling
    batch_size: int = 8


@dataclass(frozen=True)
class LangReport:
    lang: str
    tokens: int
    top1: float
    perplexity: float
    fim_cases: int
    fim_exact_match: float


def evaluate_lm(cfg: LmEvalConfig) -> tuple[list[LangReport], float]:
    """Per-language reports and the wall time they took."""
    t0 = time.perf_counter()
    model = ClientModel.load(cfg.model_dir)
    middle = model.load_middle()
    logits = lean_logits_fn(model.encoder, middle, model.decoder)
    raw_tok = load_raw_tokenizer(Path(cfg.model_dir))
    context = model.spec.max_position_embeddings
    engine = CompletionEngine.monolithic(model)
    reports = []
    for lang in cfg.langs:
        if not corpus_file(cfg.corpus_dir, cfg.split, lang).exists():
            raise ConfigError(f"no {cfg.split} split for {lang} in {cfg.corpus_dir}; run `umbra data build`")
        docs = list(read_documents(cfg.corpus_dir, cfg.split, lang))
        blocks = eval_blocks(docs, raw_tok, min(context, 512), cfg.max_tokens_per_lang)
        with torch.no_grad():
            nt = next_token_metrics(logits, blocks, cfg.batch_size)
        cases = sample_cases(docs, cfg.fim_lines, cfg.seed)
        fim = asyncio.run(fim_line_exact_match(engine, cases, cfg.fim_max_tokens))
        reports.append(LangReport(lang, nt.tokens, nt.top1, nt.perplexity, fim.cases, fim.exact_match))
    return reports, time.perf_counter() - t0


def markdown_table(reports: list[LangReport]) -> str:
    rows = ["| language | tokens | next-token top-1 | perplexity | FIM lines | FIM line exact match |",
            "|---|---:|---:|---:|---:|---:|"]
    for r in reports:
        rows.append(f"| {r.lang} | {r.tokens:,} | {r.top1:.1%} | {r.perplexity:.2f} | {r.fim_cases} "
                    f"| {r.fim_exact_match:.1%} |")
    return "\n".join(rows)


def as_json(reports: list[LangReport], seconds: float, cfg: LmEvalConfig | None = None) -> dict:
    out = {"seconds": round(seconds, 1), "languages": [asdict(r) for r in reports]}
    if cfg is not None:
        out["settings"] = {"split": cfg.split, "max_tokens_per_lang": cfg.max_tokens_per_lang,
                           "fim_lines": cfg.fim_lines, "fim_max_tokens": cfg.fim_max_tokens, "seed": cfg.seed}
    return out
