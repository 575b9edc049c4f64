"""The DP clip bound of each NOESIS shared family (docs/noesis.md, "The clip bound per family").

DP-SGD clips each document's gradient to C and adds noise σC. Where a family's gradients sit far
under C, the noise is all its update sees: the deep prompt's zero-initialized gates give
per-document gradient norms of ~2·10⁻⁴, and at the paper's C = 1 its runs at every ε followed the
same noise draw to the same weights. The rule: C is the power of ten at or just above the family's
median per-document gradient norm at initialization, at most the paper's 1 — measured on PUBLIC
code (the corpus train split the base model was trained on), so choosing C spends no privacy.

    python experiments/noesis_clip.py                 # measure, print the table
    python experiments/noesis_clip.py --check         # exit 1 where umbra's FAMILY_CLIP_NORM departs from the rule
    python experiments/noesis_clip.py --write         # the table into docs/noesis.md

Deterministic: the documents are the first --docs of each language by a hash of their path, the
parameters are each family's initialization at --seed; no noise, no sampling."""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.doc_markers import write_block  # noqa: E402
from experiments.noesis_cells import Budget, stage_one_config, subset  # noqa: E402
from umbra.data.corpus import LANGS, read_documents  # noqa: E402
from umbra.engine import ClientModel  # noqa: E402
from umbra.middle.local import LocalMiddle  # noqa: E402
from umbra.tuning.doc_blocks import DocumentBlocks, split_rows  # noqa: E402
from umbra.tuning.dp_sgd import DPRandom, flat_norms  # noqa: E402
from umbra.tuning.per_sample import per_sample_grads  # noqa: E402
from umbra.tuning.noesis_config import family_clip_norm  # noqa: E402
from umbra.tuning.shared_params import SharedParams  # noqa: E402

FAMILIES = ("soft_prompt", "deep_prompt", "lora", "bottleneck", "full")


def clip_rule(median: float, ceiling: float = 1.0) -> float:
    """The power of ten at or just above `median` (a per-document gradient norm), at most `ceiling`."""
    if not median > 0 or not math.isfinite(median):
        raise ValueError(f"a median gradient norm must be finite and > 0, got {median}")
    return min(ceiling, 10.0 ** math.ceil(math.log10(median) - 1e-9))


async def family_norms(model_dir: Path, corpus: Path, family: str, docs_per_lang: int, seed: int,
                       budget: Budget = Budget()) -> np.ndarray:
    """Per-document gradient norms of `family` at its initialization, one block per document."""
    model = ClientModel.load(model_dir)  # fresh: `full` differentiates the client's own weights
    middle = LocalMiddle(model.load_middle())
    docs = [d for lang in LANGS for d in subset(list(read_documents(corpus, "train", lang)), docs_per_lang)]
    config = stage_one_config(budget, family, 1.0, seed)
    shared = SharedParams(model, config.shared)
    blocks = DocumentBlocks(docs, model.tokenizer, config.block_len, config.fim_rate)
    rows = blocks.train_blocks(np.arange(len(docs)), DPRandom(seed))
    norms = []
    session = await middle.open_session(training=True)
    try:
        for chunk in split_rows(rows, config.physical_batch):
            per_doc, _ = await per_sample_grads(shared, middle, session, chunk)
            norms.append(flat_norms(per_doc)[chunk.weight > 0])
    finally:
        await middle.close(session)
    return torch.cat(norms).double().numpy()


def table(measured: dict[str, np.ndarray], budget: Budget) -> str:
    lines = ["| family | documents | median ‖g‖ | 10th–90th percentile | C by the rule | C used |",
             "|---|---|---|---|---|---|"]
    for family, norms in measured.items():
        lo, med, hi = np.percentile(norms, [10, 50, 90])
        used = family_clip_norm(family, budget.clip_norm)
        lines.append(f"| {family} | {len(norms)} | {med:.2e} | {lo:.2e} – {hi:.2e} | {clip_rule(med, budget.clip_norm):g} "
                     f"| {used:g} |")
    return "\n".join(lines)


def departures(measured: dict[str, np.ndarray], budget: Budget) -> list[str]:
    """The families whose clip bound in use is not the rule's."""
    out = []
    for family, norms in measured.items():
        want, used = clip_rule(float(np.median(norms)), budget.clip_norm), family_clip_norm(family, budget.clip_norm)
        if not math.isclose(want, used):
            out.append(f"{family}: the rule gives C = {want:g}, the product uses {used:g}")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=str(ROOT / "models" / "umbra-code-tiny"))
    p.add_argument("--corpus", default=str(ROOT / "data" / "corpus"), help="the PUBLIC corpus (its train split)")
    p.add_argument("--families", default=",".join(FAMILIES))
    p.add_argument("--docs", type=int, default=16, help="documents per language (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="the families' initialization (default: %(default)s)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--check", action="store_true", help="exit 1 where FAMILY_CLIP_NORM departs from the rule")
    p.add_argument("--write", action="store_true", help="write the table into docs/noesis.md")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    families = [f for f in args.families.split(",") if f]
    unknown = sorted(set(families) - set(FAMILIES))
    if unknown:
        p.error(f"unknown families {unknown}; choose from {', '.join(FAMILIES)}")
    budget = Budget()
    measured = {f: asyncio.run(family_norms(Path(args.model), Path(args.corpus), f, args.docs, args.seed, budget))
                for f in families}
    text = table(measured, budget)
    print(text)
    if args.write:
        write_block(ROOT / "docs" / "noesis.md", "noesis-clip", text)
    if args.check:
        bad = departures(measured, budget)
        for line in bad:
            print(line, file=sys.stderr)
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
