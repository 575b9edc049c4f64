"""What adapters leak to the cloud: a classifier trained on the cloud's view (the encoder's output
states, which is all the cloud receives) predicts which expert served a request, or whether an
access adapter was active, per placement of the adapters.

    python experiments/adapter_leakage.py [--model DIR] [--snippets 300] [--train-steps 60] [--seed 0]

For each placement (decoder = the default, encoder, client = both sides) it trains a LoRA expert
per language (python, go, java: next-token loss on that language's corpus train split, the middle
run in-process) and an access LoRA (on all three), then sends the SAME held-out code snippets
(test split, all languages) once per route — each expert, access on and off — and records what
the cloud receives. A linear probe on pooled states (mean and max over positions, standardised)
is trained on 2/3 of the snippets and scored on the rest: accuracy with a Wilson 95 % interval,
against chance (1/3 for the expert, 1/2 for access). The same snippet under every label keeps
the content fixed, so only the adapters can make the views differ. A last row shows what the code
itself reveals (label = the snippet's real language, decoder placement): that is the hidden
states' own leak, which INDVocab and LTokenizer address (docs/privacy/), not the adapters'.

Prints markdown (docs/benchmarks.md, "What adapters leak")."""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: `benchmarks`, `umbra`

from benchmarks.machine import describe  # noqa: E402
from umbra.data.corpus import read_split  # noqa: E402
from umbra.engine import ClientModel  # noqa: E402
from umbra.model.adapters import AdapterSet, LoraConfig, Placement, build_adapter  # noqa: E402
from umbra.paths import default_model_dir, repo_root  # noqa: E402

LANGS = ("python", "go", "java")
PLACEMENTS = (Placement.DECODER, Placement.ENCODER, Placement.CLIENT)


def windows(corpus: Path, split: str, lang: str, tokenizer, count: int, length: int, rng: random.Random):
    """`count` non-overlapping windows of `length` public ids of one language, taken from as many
    documents as possible (one window per document per round)."""
    docs = read_split(corpus, split, (lang,))
    rng.shuffle(docs)
    chunks = []
    for doc in docs:
        ids = tokenizer.encode(doc.text)
        chunks.append([ids[i : i + length] for i in range(0, len(ids) - length + 1, length)])
    out = []
    for round_ in range(max((len(c) for c in chunks), default=0)):
        out += [c[round_] for c in chunks if round_ < len(c)][: count - len(out)]
        if len(out) == count:
            return torch.tensor(out, dtype=torch.int64)
    raise SystemExit(f"the {split} split holds only {len(out)} {lang} windows of {length} tokens")


def fit(adapter, model, middle, data: torch.Tensor, steps: int, batch: int, lr: float, seed: int) -> float:
    """Adam on the adapter alone, next-token loss through encoder, middle and decoder; last loss."""
    adapter.requires_grad_(True)
    opt = torch.optim.Adam(adapter.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    pos = torch.arange(data.shape[1])[None].expand(batch, -1)
    loss = torch.tensor(float("nan"))
    for _ in range(steps):
        ids = data[torch.randint(0, data.shape[0], (batch,), generator=gen)]
        aset = AdapterSet([adapter], frozen=False)
        h = middle(model.encoder(ids, pos, adapters=aset), pos)
        logits = model.decoder(h, pos, adapters=aset)
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    adapter.requires_grad_(False)
    adapter.touch()
    return loss.item()


def cloud_view(model, ids: torch.Tensor, aset: AdapterSet) -> torch.Tensor:
    """What the cloud receives for these snippets, pooled: [N, 2C] (mean and max over positions)."""
    pos = torch.arange(ids.shape[1])[None].expand(ids.shape[0], -1)
    with torch.no_grad():
        h = model.encoder(ids, pos, adapters=aset)
    return torch.cat([h.mean(1), h.amax(1)], dim=1)


def probe_accuracy(x_tr, y_tr, x_te, y_te, classes: int, seed: int) -> float:
    """Multinomial logistic regression (standardised features, L2, full-batch L-BFGS)."""
    torch.manual_seed(seed)
    mu, sd = x_tr.mean(0), x_tr.std(0).clamp_min(1e-6)
    x_tr, x_te = (x_tr - mu) / sd, (x_te - mu) / sd
    w = torch.zeros(x_tr.shape[1], classes, requires_grad=True)
    b = torch.zeros(classes, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], max_iter=200, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(x_tr @ w + b, y_tr) + 1e-3 * w.square().sum()
        loss.backward()
        return loss

    opt.step(closure)
    with torch.no_grad():
        return ((x_te @ w + b).argmax(1) == y_te).float().mean().item()


def wilson(p: float, n: int, z: float = 1.96) -> tuple[float, float]:
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def labelled(views: list[torch.Tensor], split: int):
    """Stack per-label views [N, F] into (x_train, y_train, x_test, y_test), split by snippet."""
    xs_tr = torch.cat([v[:split] for v in views])
    xs_te = torch.cat([v[split:] for v in views])
    ys_tr = torch.cat([torch.full((split,), i) for i in range(len(views))])
    ys_te = torch.cat([torch.full((views[0].shape[0] - split,), i) for i in range(len(views))])
    return xs_tr, ys_tr, xs_te, ys_te


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, default=None, help="model directory (default: the embedded model)")
    p.add_argument("--corpus", type=Path, default=repo_root() / "data" / "corpus")
    p.add_argument("--snippets", type=int, default=300, help="held-out snippets per language")
    p.add_argument("--length", type=int, default=64, help="tokens per snippet")
    p.add_argument("--train-steps", type=int, default=60, help="Adam steps per adapter")
    p.add_argument("--rank", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None)
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    model_dir = args.model or default_model_dir()
    model = ClientModel.load(model_dir)
    middle = model.load_middle()
    spec, shape = model.spec, model.plan.shape(model.spec.num_layers)
    t0 = time.time()
    train = {lang: windows(args.corpus, "train", lang, model.tokenizer, 256, args.length, rng) for lang in LANGS}
    probe = torch.cat([windows(args.corpus, "test", lang, model.tokenizer, args.snippets, args.length, rng)
                       for lang in LANGS])
    true_lang = torch.cat([torch.full((args.snippets,), i) for i in range(len(LANGS))])
    order = torch.randperm(probe.shape[0], generator=torch.Generator().manual_seed(args.seed))
    probe, true_lang = probe[order], true_lang[order]
    split = probe.shape[0] * 2 // 3
    n_test = probe.shape[0] - split
    rows = []
    for placement in PLACEMENTS:
        config = LoraConfig(rank=args.rank, placement=placement, init_seed=args.seed)
        experts = {lang: build_adapter(lang, config, spec, shape) for lang in LANGS}
        losses = {lang: fit(a, model, middle, train[lang], args.train_steps, 8, 3e-3, args.seed)
                  for lang, a in experts.items()}
        access = build_adapter("access", config, spec, shape)
        fit(access, model, middle, torch.cat(list(train.values())), args.train_steps, 8, 3e-3, args.seed + 1)
        views = [cloud_view(model, probe, AdapterSet([experts[lang]])) for lang in LANGS]
        acc = probe_accuracy(*labelled(views, split), len(LANGS), args.seed)
        rows.append((placement.value, "which expert served", acc, 1 / 3, n_test * len(LANGS)))
        off_on = [cloud_view(model, probe, AdapterSet([experts["python"]])),
                  cloud_view(model, probe, AdapterSet([experts["python"], access]))]
        acc = probe_accuracy(*labelled(off_on, split), 2, args.seed)
        rows.append((placement.value, "access adapter active", acc, 1 / 2, n_test * 2))
        print(f"# {placement.value}: expert losses " + ", ".join(f"{k} {v:.2f}" for k, v in losses.items()),
              file=sys.stderr)
        if placement is Placement.DECODER:  # the content itself, under the default placement
            view = cloud_view(model, probe, AdapterSet([experts["python"]]))
            acc = probe_accuracy(view[:split], true_lang[:split], view[split:], true_lang[split:], len(LANGS),
                                 args.seed)
            rows.append(("decoder", "the code's own language (content, not adapters)", acc, 1 / 3, n_test))
    print(describe())
    print(f"\nModel `{Path(model_dir).name}` (split E={shape.encoder_blocks}, D={shape.decoder_blocks}), LoRA rank "
          f"{args.rank} on every projection, {args.train_steps} Adam steps per adapter; {args.snippets} test "
          f"snippets of {args.length} tokens per language, probe trained on 2/3, scored on 1/3; seed {args.seed}; "
          f"{time.time() - t0:.0f} s.\n")
    print("| placement | the probe predicts | accuracy | 95 % interval (Wilson) | chance | test views |")
    print("|---|---|---:|---|---:|---:|")
    for placement, what, acc, chance, n in rows:
        lo, hi = wilson(acc, n)
        print(f"| {placement} | {what} | {acc:.1%} | [{lo:.1%}, {hi:.1%}] | {chance:.1%} | {n} |")


if __name__ == "__main__":
    main()
