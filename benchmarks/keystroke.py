"""Keystroke-to-inline-completion latency through the real language server, and its overhead over
the engine's own time for the same requests.

    python benchmarks/keystroke.py [--keystrokes 240] [--path cpython-3.11/io.py] [--runs plain,bundle]
                                   [--threads 1] [--rtts 30,80] [--write]

A file of the corpus's test split (`data/corpus/test/python.jsonl`, code the default model never
trained on) is opened in the real language server (`python -m lsp` over stdio, a pygls client
here) with `--keystrokes` of its characters cut out from the line nearest its middle; then they are
typed back one by one: a `didChange` inserting the character, then `textDocument/inlineCompletion`
at the new cursor, the client waiting for the answer before the next keystroke (as an editor's
debounce would). The latency is the time from sending the `didChange` to receiving the answer.
The server completes through the cloud it starts itself on loopback, with the default model and
the default `completion` and `inline` options (a line mid-line and a block at a blank line, the
loop stop, the latency deadline counted from the request's arrival); `umbra/stats` after each
answer tells a type-ahead answer (lsp/typeahead.py: no decode) from a decoded one, and why a
decode stopped (its line or block ended, a loop, the deadline, the token cap).

The engine's own time: every request the server decoded is run again, right after the server's
answer, by the engine alone (`CompletionEngine.split`, a warm session, the same config and
adapters, and the same deadline counted from its own start) through a second self-started cloud
on loopback (`umbra/connect.py`, as the server makes its own), so its session sees the same
requests in the same order. The overhead is the
median over those keystrokes of server latency / engine time, with a 95 % order-statistic
interval; the answers of both are compared too. A type-ahead answer is compared with a decode of
the same request in a second warm session (untimed), so the table says whether serving the rest
of the shown completion changed what the user sees.

`--runs` plain: the default model; bundle: a client bundle made from it as `umbra init` makes one
(INDVocab ε = 1024 and LTokenizer, key in the OS keyring — a private GNOME Keyring when none
answers, as the tests use), the private mode in force. Its INDVocab noise is seeded
(`--bundle-seed`): two bundles of other seeds complete differently, in length too, and so take
different times. After the typed keystrokes, a burst:
`--burst` keystrokes sent without waiting, the server's counters before and after (decodes started,
most at once in one document) and the time from the burst's last keystroke to its answer.

`--rtts` (default 0: loopback, each side its own self-started cloud): one cloud, a subprocess on
loopback, serves both the server (its `cloud.url`, the token from an environment variable) and
the engine, through benchmarks/wan_link.py's delaying TCP proxy dialled to each round-trip time
in turn; every run (plain, bundle) is repeated per RTT. The language server and its helpers:
keystroke_lsp.py; the tables and verdicts: keystroke_report.py.

Goals (issue 19): p50 <= 150 ms and p95 <= 300 ms keystroke to inline completion; overhead <= 1.1x.
Across a link (issue 58), with the default private mode (the bundle) in force: at 30 ms RTT p50 <=
150 ms and p95 <= 300 ms, at 80 ms p50 <= 250 ms."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path[1:1] = [str(ROOT / "tests"), str(ROOT / "tests" / "lsp")]  # the lsp tests' helpers

import torch  # noqa: E402

from doc_markers import write_block  # noqa: E402
from keyring_store import keyring  # noqa: E402
from keystroke_lsp import Server, inline_params, typed_region  # noqa: E402
from keystroke_report import Keystroke, chars_right, report  # noqa: E402
from wan_link import LinkConfig, WanProxy  # noqa: E402
from lsp.documents import Document  # noqa: E402
from lsp.options import InitializationOptions  # noqa: E402
from server.launch import local_cloud_sync  # noqa: E402
from umbra.connect import CloudConfig, open_middle  # noqa: E402
from umbra.engine import ClientModel, CompletionEngine  # noqa: E402
from umbra.paths import default_model_dir  # noqa: E402
from umbra.privacy.bundle import BundleConfig, init_bundle  # noqa: E402

TOKEN_ENV = "UMBRA_KEYSTROKE_BENCH_TOKEN"  # the shared cloud's token, for the server's `cloud.tokenEnv`


async def run_mode(name: str, model: ClientModel, options: dict, text: str, start: int, args, workdir: Path,
                   link: WanProxy | None = None) -> dict:
    """One typing run; with `link`, the server and the engine reach the shared cloud through it."""
    cloud = CloudConfig(threads=args.threads)
    if link is not None:
        url = link.url(args.cloud_url)
        options = {**options, "cloud": {"url": url, "tokenEnv": TOKEN_ENV}}
        cloud = CloudConfig(url=url, token=os.environ[TOKEN_ENV])
    settings = InitializationOptions.from_json(options)
    config = settings.inline.engine_config(settings.completion.engine_config())  # the editor's requests
    budget = settings.inline.deadline_s
    typed = text[start:start + args.keystrokes]
    base = text[:start] + text[start + args.keystrokes:]
    server = Server(options, workdir / f"lsp-{name}.log")
    async with open_middle(model, cloud) as middle:
        engine = CompletionEngine.split(model, middle.middle, config, context_length=middle.max_seq_len)
        _, adapters = engine.route("python")
        await server.start()
        try:
            # `session` runs what the server decoded, in the same order; `check` the type-ahead answers
            async with engine.session() as session, engine.session() as check:
                server.open(base)
                # one untimed request each at the cursor: the first prompt's full prefill
                await server.complete(inline_params(Document(base).position(start)))
                await session.complete(base[:start], base[start:], config, adapters=adapters)
                strokes, after = [], await server.stats()
                for i, char in enumerate(typed):
                    before = after
                    t0 = time.perf_counter()
                    answer = await server.complete(server.type(start + i, char))
                    server_s = time.perf_counter() - t0
                    after = await server.stats()
                    prefix, suffix = server.text[:start + i + 1], server.text[start + i + 1:]
                    truth = text[start + i + 1:]
                    stop = next((r for r, n in after["stops"].items() if n > before["stops"].get(r, 0)), None)
                    if after["completions"]["typeahead"] > before["completions"]["typeahead"]:
                        engine_s, result = None, await check.complete(prefix, suffix, config, adapters=adapters)
                    else:
                        t0 = time.perf_counter()
                        result = await session.complete(prefix, suffix, config, adapters=adapters,
                                                        deadline=None if budget is None else time.monotonic() + budget)
                        engine_s = time.perf_counter() - t0
                    strokes.append(Keystroke(server_s, engine_s, result.text == answer, chars_right(answer, truth),
                                             chars_right(result.text, truth), result.generated_tokens, stop))
            burst = await run_burst(server, args.burst)
        finally:
            await server.stop()
    return {"strokes": strokes, "burst": burst, "rtt_ms": 0.0 if link is None else link.link.rtt_ms}


async def run_burst(server: Server, n: int) -> dict:
    """`n` keystrokes at the end of the document, none waited for; the counters and the last answer."""
    before = await server.stats()
    end = len(server.text)
    pending = [server.send(server.type(end + i, c)) for i, c in enumerate(("x = self.value + other.value  # " * 4)[:n])]
    t0 = time.perf_counter()
    last = await asyncio.gather(*pending, return_exceptions=True)
    last_s = time.perf_counter() - t0
    after = await server.stats()
    return {"n": n, "last_ms": 1000 * last_s, "answered": isinstance(last[-1], str),
            "started": after["decodes"]["started"] - before["decodes"]["started"],
            "skipped": after["completions"]["skipped"] - before["completions"]["skipped"],
            "max_per_document": after["decodes"]["maxPerDocument"]}


def _forget_keys(store, service) -> None:
    for name in store.list():
        store.delete(name)
    if service is not None:
        service.stop()


async def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--keystrokes", type=int, default=240, help="characters typed (default: %(default)s)")
    p.add_argument("--path", default="cpython-3.11/multiprocessing/resource_tracker.py",
                   help="the file of data/corpus/test/python.jsonl to type (default: %(default)s)")
    p.add_argument("--runs", default="plain,bundle", help="plain, bundle or both (default: %(default)s)")
    p.add_argument("--threads", type=int, default=1, help="torch threads of the server, its cloud and the engine")
    p.add_argument("--burst", type=int, default=50, help="keystrokes of the burst sent without waiting")
    p.add_argument("--bundle-seed", type=int, default=0,
                   help="the bundle's INDVocab seed, so that runs complete alike (default: %(default)s)")
    p.add_argument("--rtts", default="0",
                   help="round-trip times in ms through the delaying proxy, comma-separated; 0 alone: loopback, "
                        "no proxy (default: %(default)s)")
    p.add_argument("--context-tokens", type=int, default=None,
                   help="the server's prompt budget: completion.contextTokens and inline.contextTokens "
                        "(default: the schema's, 1,024 and 512)")
    p.add_argument("--note", default="", help="a sentence on the machine's state, added to the table's text")
    p.add_argument("--write", action="store_true", help="write the tables into docs/benchmarks.md")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    rows = {json.loads(line)["path"]: json.loads(line)["text"]
            for line in (ROOT / "data/corpus/test/python.jsonl").read_text().splitlines()}
    if args.path not in rows:
        raise SystemExit(f"{args.path} is not in data/corpus/test/python.jsonl")
    text = rows[args.path]
    if len(text) < args.keystrokes + 100:
        raise SystemExit(f"{args.path} is too short for {args.keystrokes} keystrokes")
    start = typed_region(text, args.keystrokes)
    started = time.strftime("%Y-%m-%d %H:%M")
    base_dir = default_model_dir()
    runs: dict[str, dict] = {}
    rtts = [float(x) for x in args.rtts.split(",")]
    with tempfile.TemporaryDirectory(prefix="umbra-keystroke-") as tmp, contextlib.ExitStack() as stack:
        workdir = Path(tmp)
        if args.rtts != "0":  # one cloud behind the link for the server and the engine
            cloud = stack.enter_context(local_cloud_sync(base_dir, settings={"torch_threads": args.threads}))
            args.cloud_url = cloud.base_url
            os.environ[TOKEN_ENV] = cloud.token
        plans = []  # (run name, model, server options)
        for mode in args.runs.split(","):
            if mode == "plain":
                plans.append(("no bundle", ClientModel.load(base_dir), {"model": {"dir": str(base_dir)}}))
            elif mode == "bundle":
                store, service = keyring()
                stack.callback(_forget_keys, store, service)
                bundle = workdir / "bundle"
                manifest = init_bundle(base_dir, BundleConfig(seed=args.bundle_seed), bundle, store=store)
                plans.append((f"bundle (NOIR ε={manifest.epsilon:g})", ClientModel.from_bundle(bundle, base_dir, store=store),
                              {"model": {"bundle": str(bundle), "dir": str(base_dir), "keyringService": store.service}}))
            else:
                raise SystemExit(f"unknown run {mode!r} (plain, bundle)")
        for rtt in rtts:
            for name, model, options in plans:
                options = {**options, "threads": args.threads}
                if args.context_tokens is not None:
                    options["completion"] = {"contextTokens": args.context_tokens}  # and the editor's cap
                    options["inline"] = {"contextTokens": args.context_tokens}
                if args.rtts == "0":
                    runs[name] = await run_mode(name, model, options, text, start, args, workdir)
                    continue
                target = ("127.0.0.1", int(args.cloud_url.rsplit(":", 1)[1]))
                with WanProxy(target, LinkConfig(one_way_ms=rtt / 2)) as link:
                    runs[f"{name}, {rtt:g} ms RTT"] = await run_mode(name, model, options, text, start, args, workdir,
                                                                     link)
                print(f"{name}, {rtt:g} ms RTT: done", flush=True)
    body = report(runs, args, args.path, started)
    print(body)
    if args.write:
        write_block(ROOT / "docs/benchmarks.md", "keystroke" if args.rtts == "0" else "keystroke-wan", body)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
