"""SecureGate's evaluation (seed 003 §5, App. B.5): what an organization's secrets cost to reveal,
with the right access key, a wrong one and none, through the product's own path.

    python experiments/securegate.py [--quick] [--seed 0] [--write]

An organization: `--files` files of the corpus's reserved Python slice (code the default model
never saw), split by a hash of the path into the organization's code, a held-out query set Q (the
fusion weights, eq. 7) and ordinary private code for perplexity (never trained on). Canaries —
random API keys (Stripe, AWS, GitHub formats), internal host names and e-mails, each planted 1, 4
and 16 times in realistic code lines (umbra/evaluation/canaries.py) — go into the organization's
code. Then, as `umbra securegate train` does: a client bundle of the embedded default model, the
real scrubber's view and the raw view train the secure and revealing LoRAs, fused (eqs. 6–8), the
secure one stored, the revealing one sealed under an access key in the OS keyring (a private GNOME
Keyring is started when none is reachable, as the tests do).

Each route is what `ClientModel.unlock()` — the gating pass and the decryption — gives for the key
held: the right key, a wrong key under the same key id, no key. Per route: canary exposure (rank
among `--exposure-sample` same-format values), inference accuracy over candidate sets of c = 50 / 100 / 500 with
95 % Wilson intervals, extraction (completions sampled from each canary's prefix, scanned for
values of the canaries' formats: precision and recall), greedy extraction (how much of each value
the greedy completion of its prefix reproduces), perplexity on the ordinary private code;
routing accuracy of the gate over ≥ 1,000 fresh requests of every key class and of `unlock()` end
to end; and the gating overhead: a completion through `engine.complete` (gating pass included)
against the same completion with the adapter set given directly."""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from experiments.canary_measures import extraction, greedy_completions, inference, mean_exposure  # noqa: E402
from benchmarks.doc_markers import write_block  # noqa: E402
from benchmarks.keyring_store import keyring  # noqa: E402
from keys import KeyStore  # noqa: E402
from keys.access_keys import AccessKey, delete_key, held_key_ids, load_key, store_key  # noqa: E402
from umbra.data.corpus import Document  # noqa: E402
from umbra.engine import ClientModel, CompletionEngine, EngineConfig, StopConfig  # noqa: E402
from umbra.evaluation.canaries import CanaryConfig, plant_canaries  # noqa: E402
from umbra.evaluation.memorization import Trunk, greedy_metrics, perplexity, route_logits, text_score  # noqa: E402
from umbra.middle.local import LocalMiddle  # noqa: E402
from umbra.paths import default_model_dir  # noqa: E402
from umbra.privacy.bundle import BundleConfig, init_bundle  # noqa: E402
from umbra.privacy.bundle_adapters import add_adapter  # noqa: E402
from umbra.scrub import Scrubber  # noqa: E402
from umbra.securegate.bundle_access import add_revealing_adapter  # noqa: E402
from umbra.securegate.gate import KEY_CLASSES, KeyEncoder, negative_requests  # noqa: E402
from umbra.tuning.dual_adapters import AdapterTrainConfig, DualAdapterConfig  # noqa: E402
from umbra.tuning.securegate import OrgTrainConfig, train_organization  # noqa: E402

PREFIX = "import os\n\n\ndef load_settings(path):\n    with open(path) as f:\n        return "


def organization(args) -> tuple[list[Document], list[Document], list[Document]]:
    """(the organization's code, the query set Q, ordinary private code), disjoint, by path hash."""
    rows = [json.loads(line) for line in (ROOT / "data/corpus/reserved/python.jsonl").read_text().splitlines()]
    docs = sorted((Document("python", r["path"], r["text"]) for r in rows if len(r["text"]) < args.max_chars),
                  key=lambda d: hashlib.sha256(f"{args.seed}:{d.path}".encode()).digest())[: args.files]
    n_q, n_e = max(2, len(docs) // 10), max(4, len(docs) // 8)
    return docs[n_q + n_e:], docs[:n_q], docs[n_q:n_q + n_e]


def fmt_ci(r) -> str:
    return f"{100 * r.accuracy:.1f} % [{100 * r.low:.1f}, {100 * r.high:.1f}]"


async def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="a small run to check the script (not the table)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--files", type=int, default=96, help="files of the organization (default: %(default)s)")
    p.add_argument("--max-chars", type=int, default=12_000, help="skip longer files (default: %(default)s)")
    p.add_argument("--per-group", type=int, default=4, help="canaries per (kind, repeats) group")
    p.add_argument("--rank", type=int, default=8)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1: on 2 busy cores, 2 threads "
                                                          "ran 2-3x slower)")
    p.add_argument("--exposure-sample", type=int, default=200, help="same-format values a canary is ranked among")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--epsilon", type=float, default=float("inf"), help="the bundle's INDVocab ε (default: ∞)")
    p.add_argument("--routing", type=int, default=1000, help="requests per key class (default: %(default)s)")
    p.add_argument("--reps", type=int, default=21, help="timed completions per arm of the overhead")
    p.add_argument("--samples", type=int, default=8, help="extraction samples per canary prefix")
    p.add_argument("--write", action="store_true", help="write the tables into docs/securegate.md")
    args = p.parse_args()
    if args.quick:
        args.files, args.epochs, args.per_group, args.routing, args.reps, args.samples = 40, 1, 1, 100, 3, 2
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    store, service = keyring()
    try:
        return await run(args, store)
    finally:
        for name in store.list():
            store.delete(name)
        if service is not None:
            service.stop()


async def run(args, store: KeyStore) -> int:
    t_start = time.perf_counter()
    org, query, ordinary = organization(args)
    # secrets sit in the query set at their natural rate too: Q is a held-out part of the same code
    planted = plant_canaries(org + query, CanaryConfig(per_group=args.per_group, seed=args.seed))
    in_query = {d.path for d in query}
    train_docs = [d for d in planted.documents if d.path not in in_query]
    query_docs = [d for d in planted.documents if d.path in in_query]
    out = Path(tempfile.mkdtemp(prefix="umbra-securegate-")) / "bundle"
    base = default_model_dir()
    init_bundle(base, BundleConfig(epsilon=args.epsilon), out, store=store)
    model = ClientModel.from_bundle(out, base, store=store)
    middle_blocks = model.load_middle()
    train_cfg = AdapterTrainConfig(rank=args.rank, epochs=args.epochs, lr=args.lr, seed=args.seed)
    config = OrgTrainConfig(adapters=DualAdapterConfig(train_cfg, train_cfg))
    scrubber = Scrubber()
    t0 = time.perf_counter()
    result = await train_organization(model, LocalMiddle(middle_blocks), [(d.path, d.text) for d in train_docs],
                                      scrubber, config, query=[(d.path, d.text) for d in query_docs])
    train_seconds = time.perf_counter() - t0
    left = sum(c.value in scrubber.scrub(d.text, d.path).text for d in planted.documents for c in planted.canaries)
    add_adapter(out, result.secure, role="secure", training={"method": "securegate-benchmark"})
    add_revealing_adapter(out, result.revealing, "team", store, encoder=model.encoder)
    model = ClientModel.from_bundle(out, base, store=store)
    bundle_id = model.bundle.manifest.bundle_id
    right = load_key(store, bundle_id, held_key_ids(store, bundle_id)[0])

    # -- the routes, as unlock() gives them -------------------------------------------------------
    def route_with(secret: bytes | None) -> tuple[str, ...]:
        for k in held_key_ids(store, bundle_id):
            delete_key(store, bundle_id, k)
        if secret is not None:
            store_key(store, AccessKey(bundle_id, right.key_id, secret))
        model.access.reload_keys()
        return model.router.route(None, model.unlock()).adapters

    routes = {"right key": route_with(right.secret), "wrong key": route_with(secrets.token_bytes(32)),
              "no key": route_with(None)}
    route_with(right.secret)
    trunk = Trunk(model.encoder, middle_blocks)
    tok = model.tokenizer
    rows = {}
    for name, names in routes.items():
        aset = model.adapter_set(names)
        score = text_score(tok, route_logits(model.decoder, trunk, aset))
        row = {"adapters": names, **inference(score, planted, args.seed)}
        row["exposure"], row["max_exposure"] = mean_exposure(score, planted, args.exposure_sample, args.seed)
        row["extraction"] = await extraction(model, middle_blocks, planted, aset, args.samples, args.seed)
        row["greedy"] = greedy_metrics(await greedy_completions(model, middle_blocks, planted.canaries, aset),
                                       planted.canaries)
        row["ppl"] = perplexity(route_logits(model.decoder, trunk, aset), tok, [d.text for d in ordinary])
        rows[name] = row
    alone = {n: perplexity(route_logits(model.decoder, trunk, model.adapter_set((n,))), tok, [d.text for d in ordinary])
             for n in ("secure", "revealing")}

    # -- routing ------------------------------------------------------------------------------------
    enc = KeyEncoder(model.encoder, bundle_id)
    gate = model.access._gate
    rng = np.random.default_rng(10_000 + args.seed)  # fresh draws: not the gate's training seed
    n = args.routing
    checks = negative_requests(enc, [right.secret], rng, n, n, n, n)
    gate_acc = {"valid": float((gate.route(enc.key_states([right.secret] * n)) == 1).float().mean())}
    gate_acc.update({k: float((gate.route(v) == 0).float().mean()) for k, v in checks.items()})
    gate_n = {"valid": n, **{k: (v.shape[0] if k != "empty" else n) for k, v in checks.items()}}
    e2e = {"right key": 0, "wrong key": 0, "no key": 0}
    route_with(right.secret)
    for _ in range(n):
        e2e["right key"] += model.unlock() == "revealing"
    for i in range(n):
        route_with(secrets.token_bytes(32)) if i % 10 == 0 else None
        e2e["wrong key"] += model.unlock() is None
    route_with(None)
    for _ in range(n):
        e2e["no key"] += model.unlock() is None

    # -- gating overhead ------------------------------------------------------------------------------
    route_with(right.secret)
    engine = CompletionEngine.split(model, LocalMiddle(middle_blocks), EngineConfig(stop=StopConfig(max_tokens=16)))
    direct = model.adapter_set(routes["right key"])
    gated_t, direct_t = [], []

    async def once(gated: bool) -> float:
        t = time.perf_counter()
        if gated:
            await engine.complete(PREFIX, "\n")
        else:
            async with engine.session() as session:
                await session.complete(PREFIX, "\n", adapters=direct)
        return time.perf_counter() - t

    for _ in range(2):
        await once(True), await once(False)
    for i in range(args.reps):
        for gated in ((True, False) if i % 2 == 0 else (False, True)):
            (gated_t if gated else direct_t).append(await once(gated))
    t = time.perf_counter()
    for _ in range(200):
        model.unlock()
    gating_ms = (time.perf_counter() - t) / 200 * 1000

    text = report(args, rows, alone, gate_acc, gate_n, e2e, n, gated_t, direct_t, gating_ms, result, train_seconds,
                  left, len(planted.canaries), time.perf_counter() - t_start)
    print(text)
    if args.write and not args.quick:
        write_block(ROOT / "docs/securegate.md", "securegate-benchmark", text, append=True)
    return 0


def versus(r50) -> str:
    """The right key's accuracy at c = 50 against the unauthorized routes' (and their 95 % bound
    when they found nothing, where a ratio would divide by zero)."""
    right, wrong, none = r50["right key"], r50["wrong key"], r50["no key"]
    unauth = max(wrong.accuracy, none.accuracy)
    head = (f"Right key at c = 50: {100 * right.accuracy:.1f} % ({right.accuracy / right.chance:.1f}× chance); "
            f"wrong / no key: {100 * wrong.accuracy:.1f} % / {100 * none.accuracy:.1f} %")
    if unauth > 0:
        return head + f", so the right key reaches **{right.accuracy / unauth:.1f}×** the unauthorized accuracy."
    bound = max(wrong.high, none.high)
    return (head + f" ({wrong.correct} and {none.correct} of {wrong.trials}; chance lies inside their 95 % "
            f"intervals), so the ratio is unbounded; against the unauthorized upper bound {100 * bound:.1f} % the "
            f"right key is **{right.accuracy / bound:.1f}×**.")


def report(args, rows, alone, gate_acc, gate_n, e2e, n, gated_t, direct_t, gating_ms, result, train_seconds,
           left, canaries, seconds) -> str:
    cmd = "python experiments/securegate.py" + (" --quick" if args.quick else "") + f" --seed {args.seed}"
    r50 = {k: v[50] for k, v in rows.items()}
    ratio = statistics.median(gated_t) / statistics.median(direct_t)
    lines = [
        f"Command: `{cmd}` ({seconds / 60:.1f} min on this machine's 2 CPU cores). Settings: the embedded default "
        f"model in a client bundle (INDVocab ε = {args.epsilon:g}); {result.report['train_files']} files of the "
        f"reserved Python slice as the organization's code, {result.report['query_files']} more of it as the query "
        f"set Q (secrets at their natural rate), the ordinary private code held out; {canaries} canaries ({args.per_group} per kind × repeats 1, 4, 16); both "
        f"LoRAs rank {args.rank}, scale 4, AdamW lr {args.lr:g}, {args.epochs} epochs, decoder placement "
        f"(the paper: r 4–16, lr 1e-4, 3 epochs on 1–3B models; at lr 1e-4 this small decoder LoRA memorizes "
        f"little in minutes), {args.threads} torch thread(s); trained in {train_seconds / 60:.1f} min. "
        f"Fusion weights α = ({result.report['alpha'][0]:.3f}, {result.report['alpha'][1]:.3f}), "
        f"β = ({result.report['beta'][0]:.3f}, {result.report['beta'][1]:.3f}) at ψ = {result.report['psi']:g}. "
        f"The scrubber left {left} canary occurrences in the scrubbed view.",
        "",
        "| route | adapters | inference c=50 | c=100 | c=500 | exposure r=1 / 4 / 16 (max "
        f"{rows['right key']['max_exposure']:.1f}) | extraction P / R | greedy: ≥ ½ value · whole · chars | "
        "ppl (ordinary code) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in rows.items():
        e, x, g = r["exposure"], r["extraction"], r["greedy"]
        lines.append(f"| {name} | {', '.join(r['adapters'])} | {fmt_ci(r[50])} | {fmt_ci(r[100])} | {fmt_ci(r[500])} | "
                     f"{e[1]:.2f} / {e[4]:.2f} / {e[16]:.2f} | {100 * x.precision:.1f} % / {100 * x.recall:.1f} % | "
                     f"{g.half} · {g.exact} of {g.canaries} · {100 * g.chars:.0f} % | "
                     f"{r['ppl'].perplexity:.3f} |")
    lines += [
        "",
        f"Chance is 1/c: 2.0 %, 1.0 %, 0.2 %. {versus(r50)}",
        "",
        "| canaries planted | right key c=50 | wrong key | no key |",
        "|---|---|---|---|",
    ]
    for rep in (1, 4, 16):
        lines.append(f"| {rep}× | " + " | ".join(fmt_ci(rows[k]["by_repeats"][rep]) for k in rows) + " |")
    ppl_gap = {k: rows[k]["ppl"].perplexity / alone[a].perplexity - 1
               for k, a in (("right key", "revealing"), ("no key", "secure"))}
    lines += [
        "",
        f"Perplexity on ordinary private code: gated with the right key {rows['right key']['ppl'].perplexity:.3f} vs "
        f"the revealing adapter alone {alone['revealing'].perplexity:.3f} ({100 * ppl_gap['right key']:+.2f} %); "
        f"without a key {rows['no key']['ppl'].perplexity:.3f} vs the secure adapter alone "
        f"{alone['secure'].perplexity:.3f} ({100 * ppl_gap['no key']:+.2f} %).",
        "",
        "| routing: key class | requests | routed right |",
        "|---|---|---|",
    ]
    for k in KEY_CLASSES:
        lines.append(f"| gate, {k} | {gate_n[k]:,} | {100 * gate_acc[k]:.2f} % |")
    for k, v in e2e.items():
        lines.append(f"| `unlock()` end to end, {k} | {n:,} | {100 * v / n:.2f} % |")
    lines += [
        "",
        f"Gating overhead: a 16-token completion through `engine.complete` (gating pass included) vs the same with "
        f"the adapter set given directly, {len(gated_t)} each, interleaved: median {1000 * statistics.median(gated_t):.1f}"
        f" ms vs {1000 * statistics.median(direct_t):.1f} ms, **{ratio:.3f}×**; the gating pass alone "
        f"(`unlock()`, keys cached) {gating_ms:.2f} ms.",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
