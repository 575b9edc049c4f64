"""Completion latency and cloud round trips across a dialled network link, step by step and speculative.

    python benchmarks/wan.py                       # 0/30/80/150 ms RTT, 12 cursors, up to 16 tokens
    python benchmarks/wan.py --rtts 0,30,80 --positions 20 --write
    python benchmarks/wan.py --rtts 0,30,80 --bundle      # a client bundle as `umbra init` makes it (untuned)
    python benchmarks/wan.py --rtts 0,30,80 --bundle-dir DIR [--service umbra]   # your bundle, e.g. tuned

The real cloud service runs as a subprocess on loopback (server.launch.local_cloud_sync, the
default model's middle blocks, one torch thread); the client (this process, one torch thread)
reaches it through benchmarks/wan_link.WanProxy, a delaying TCP proxy (one-way delay = RTT/2,
optional jitter and bandwidth cap; this kernel has no netem). Cursors: line starts and mid-line
points of files of the corpus's test split (python, go, java; code the default model never saw
in training), fixed by --seed. For each cursor a warm session first completes one character
earlier (untimed: the prompt's prefill), then the timed request completes at the cursor (one
keystroke: prefix reuse), once with speculation off and once on, alternating, in one run on the
same link, so load drifts hit both alike. Reported per RTT and mode: mean and median latency of
the timed request, its round trips (mean and median) (Middle.round_trips: stream steps, HTTP frames, truncates),
generated tokens per round trip, and for speculation the verify frames and the acceptance of
each draft source (prompt lookup, the client's blocks with the middle skipped). The greedy texts
of the two modes must be identical; the script counts any that differ. `--bundle`: the client
holds a bundle made from the model as `umbra init` makes one (INDVocab ε = 1024 + LTokenizer, seed
0, its key in a throwaway keyring), untuned: its completions are not the model's (top-1 ≤ 3.6 %,
README), so its drafts are rarely accepted; the private mode users run is that bundle after
`umbra tune` (the clean residual), which `--bundle-dir DIR` measures (its key in the keyring
service `--service`). Under a bundle the speculative frames have a fixed k (no ladder: invariant
7), and the step-by-step row is what `auto` did under a bundle before issue 58."""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402
from doc_markers import write_block  # noqa: E402
from machine import describe  # noqa: E402
from wan_link import LinkConfig, WanProxy  # noqa: E402

from server.launch import local_cloud_sync  # noqa: E402
from umbra.engine import ClientModel, CompletionEngine, EngineConfig, StopConfig  # noqa: E402
from umbra.engine.config import SpeculationConfig  # noqa: E402
from umbra.middle.remote import RemoteMiddle  # noqa: E402
from umbra.paths import default_model_dir  # noqa: E402
from umbra.privacy.bundle import BundleConfig, init_bundle  # noqa: E402

LANGUAGES = ("python", "go", "java")


def cursors(n: int, seed: int) -> list[tuple[str, str, str]]:
    """n (language, prefix, suffix) cursors: half at line starts after the indentation, half mid-line."""
    rng = random.Random(seed)
    files = {lang: [json.loads(line)["text"] for line in (ROOT / f"data/corpus/test/{lang}.jsonl").read_text().splitlines()]
             for lang in LANGUAGES}
    out = []
    while len(out) < n:
        lang = LANGUAGES[len(out) % len(LANGUAGES)]
        text = rng.choice(files[lang])
        lines = text.split("\n")
        if len(lines) < 20:
            continue
        i = rng.randrange(10, len(lines) - 5)
        line = lines[i]
        if not line.strip():
            continue
        start = sum(len(x) + 1 for x in lines[:i])
        indent = len(line) - len(line.lstrip())
        at = start + (indent if len(out) % 2 == 0 else indent + rng.randrange(1, max(2, len(line) - indent)))
        out.append((lang, text[max(0, at - 3000) : at], text[at : at + 1000]))
    return out


async def measure_link(model: ClientModel, cloud, rtt_ms: float, points, args) -> dict:
    link = LinkConfig(one_way_ms=rtt_ms / 2, jitter_ms=min(args.jitter_ms, rtt_ms / 2),
                      bandwidth_mbps=args.bandwidth_mbps)
    modes = {"step by step": "off", "speculative": "on"}
    rows = {name: dict(latency=[], trips=[], tokens=[], frames=0, lookup=[0, 0], model=[0, 0]) for name in modes}
    differ = 0
    with WanProxy(("127.0.0.1", int(cloud.base_url.rsplit(":", 1)[1])), link) as proxy:
        async with RemoteMiddle(proxy.url(cloud.base_url), cloud.token, hidden_size=model.spec.hidden_size) as middle:
            engine = CompletionEngine.split(model, middle, context_length=middle.info["max_seq_len"])
            for i, (_, prefix, suffix) in enumerate(points):
                texts = {}
                order = list(modes.items()) if i % 2 == 0 else list(modes.items())[::-1]
                for name, mode in order:
                    cfg = EngineConfig(stop=StopConfig(max_tokens=args.max_tokens, multiline=True),
                                       speculation=SpeculationConfig(mode=mode, k=args.k, k_max=args.k_max))
                    async with engine.session(cfg) as session:
                        await session.complete(prefix[:-1], prefix[-1:] + suffix)  # warm: the prompt's prefill
                        t0 = time.perf_counter()
                        result = await session.complete(prefix, suffix)
                        seconds = time.perf_counter() - t0
                    row = rows[name]
                    row["latency"].append(seconds * 1000)
                    row["trips"].append(result.round_trips)
                    row["tokens"].append(result.generated_tokens)
                    if result.speculation is not None:
                        c = result.speculation
                        row["frames"] += c.frames
                        row["lookup"][0] += c.lookup_drafted
                        row["lookup"][1] += c.lookup_accepted
                        row["model"][0] += c.model_drafted
                        row["model"][1] += c.model_accepted
                    texts[name] = result.text
                differ += len(set(texts.values())) > 1
    out = {"rtt_ms": rtt_ms, "link": {"one_way_ms": link.one_way_ms, "jitter_ms": link.jitter_ms,
                                      "bandwidth_mbps": link.bandwidth_mbps}, "texts_differ": differ}
    for name, row in rows.items():
        out[name] = {
            "latency_ms_mean": statistics.fmean(row["latency"]), "latency_ms_median": statistics.median(row["latency"]),
            "trips_mean": statistics.fmean(row["trips"]), "trips_median": statistics.median(row["trips"]),
            "tokens_mean": statistics.fmean(row["tokens"]),
            "tokens_per_trip": sum(row["tokens"]) / max(1, sum(row["trips"])),
            "frames": row["frames"], "lookup_drafted_accepted": row["lookup"], "model_drafted_accepted": row["model"],
        }
    return out


def table(results: list[dict]) -> str:
    lines = ["| RTT | mode | latency mean (median) ms | round trips mean (median) | tokens | tokens / trip | "
             "prompt lookup: accepted / drafted | client blocks: accepted / drafted |",
             "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        for name in ("step by step", "speculative"):
            m = r[name]
            acc = [(f"{a} / {d} ({a / d:.0%})" if d else "–") if name == "speculative" else "–"
                   for d, a in (m["lookup_drafted_accepted"], m["model_drafted_accepted"])]
            lines.append(f"| {r['rtt_ms']:g} ms | {name} | {m['latency_ms_mean']:.0f} ({m['latency_ms_median']:.0f}) | "
                         f"{m['trips_mean']:.1f} ({m['trips_median']:g}) | {m['tokens_mean']:.1f} | {m['tokens_per_trip']:.2f} | {acc[0]} | {acc[1]} |")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=str(default_model_dir()), help="model directory (default: the default model)")
    p.add_argument("--rtts", default="0,30,80,150", help="round-trip times in ms, comma-separated (default: %(default)s)")
    p.add_argument("--positions", type=int, default=12, help="cursors per RTT (default: %(default)s)")
    p.add_argument("--max-tokens", type=int, default=16, help="tokens per completion at most (default: %(default)s)")
    p.add_argument("--k", type=int, default=SpeculationConfig().k,
                   help="drafted positions per verify frame, the ladder's first rung (default: %(default)s)")
    p.add_argument("--k-max", type=int, default=None, help="the ladder's top (default: 2k)")
    p.add_argument("--jitter-ms", type=float, default=0.0, help="jitter of each direction (default: %(default)s)")
    p.add_argument("--bandwidth-mbps", type=float, default=None, help="cap of each direction (default: none)")
    p.add_argument("--seed", type=int, default=0, help="of the cursors (default: %(default)s)")
    p.add_argument("--json", default=str(ROOT / "benchmarks/results/wan.json"), help="results file (default: %(default)s)")
    p.add_argument("--bundle", action="store_true",
                   help="the client holds a bundle made from the model as `umbra init` makes it (untuned)")
    p.add_argument("--bundle-dir", type=Path, default=None,
                   help="the client holds this bundle (`umbra init`, then `umbra tune`), made from --model")
    p.add_argument("--service", default=None, help="keyring service holding --bundle-dir's key (default: umbra)")
    p.add_argument("--write", action="store_true", help="write the table into docs/benchmarks.md")
    args = p.parse_args()
    torch.set_num_threads(1)
    if args.bundle_dir is not None:
        from keys import KeyStore

        store = KeyStore(service=args.service) if args.service else KeyStore()
        args.bundle = True
        return run(ClientModel.from_bundle(args.bundle_dir, Path(args.model), store=store), args)
    with tempfile.TemporaryDirectory(prefix="umbra-wan-") as tmp:
        if not args.bundle:
            return run(ClientModel.load(args.model), args)
        from keyring_store import keyring

        store, service = keyring()
        try:
            init_bundle(Path(args.model), BundleConfig(seed=0), Path(tmp) / "bundle", store=store)
            return run(ClientModel.from_bundle(Path(tmp) / "bundle", Path(args.model), store=store), args)
        finally:
            for name in store.list():
                store.delete(name)
            if service is not None:
                service.stop()


def write_record(path: Path, started: str, args, **measured) -> None:
    """A run's JSON record: when, on what machine, its arguments (a path as its text) and what it measured."""
    path.write_text(json.dumps({"started": started, "machine": describe(), "args": vars(args), **measured},
                               indent=1, default=str) + "\n")


def run(model: ClientModel, args) -> int:
    points = cursors(args.positions, args.seed)
    started = time.strftime("%Y-%m-%d %H:%M")
    results = []
    with local_cloud_sync(args.model, settings={"torch_threads": 1}) as cloud:
        for rtt in (float(x) for x in args.rtts.split(",")):
            results.append(asyncio.run(measure_link(model, cloud, rtt, points, args)))
            print(json.dumps(results[-1]), flush=True)
    text = table(results)
    print(text)
    write_record(Path(args.json), started, args, results=results)
    if args.write:
        note = (f"Measured {started} UTC by `python benchmarks/wan.py --rtts {args.rtts} --positions {args.positions} "
                f"--max-tokens {args.max_tokens} --k {args.k}{'' if args.k_max is None else f' --k-max {args.k_max}'}"
                f"{f' --bundle-dir {args.bundle_dir}' if args.bundle_dir else ' --bundle' if args.bundle else ''}` "
                f"on {describe()}; link: benchmarks/wan_link.py's "
                f"delaying TCP proxy on 127.0.0.1 (no netem in this kernel).")
        write_block(ROOT / "docs/benchmarks.md", "wan-bundle" if args.bundle else "wan", note + "\n\n" + text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
