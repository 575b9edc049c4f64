"""Keystroke-to-inline-completion latency through the real language server, and its overhead over
the engine's own time for the same requests.

    python benchmarks/keystroke.py [--keystrokes 240] [--path cpython-3.11/io.py] [--runs plain,bundle]
                                   [--threads 1] [--write]

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

Goals (issue 19): p50 <= 150 ms and p95 <= 300 ms keystroke to inline completion; overhead <= 1.1x."""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
from collections import Counter
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path[1:1] = [str(ROOT / "tests"), str(ROOT / "tests" / "lsp")]  # the lsp tests' helpers

import torch  # noqa: E402
from lsprotocol import types  # noqa: E402
from pygls.lsp.client import LanguageClient  # noqa: E402

from doc_markers import write_block  # noqa: E402
from lsp_helpers import plain  # noqa: E402
from machine import describe  # noqa: E402
from keyring_store import keyring  # noqa: E402
from split_overhead import median_ci_ranks  # noqa: E402
from lsp.documents import Document  # noqa: E402
from lsp.options import InitializationOptions  # noqa: E402
from lsp.server import STATS_METHOD, STATUS_METHOD  # noqa: E402
from umbra.connect import CloudConfig, open_middle  # noqa: E402
from umbra.engine import ClientModel, CompletionEngine  # noqa: E402
from umbra.paths import default_model_dir  # noqa: E402
from umbra.privacy.bundle import BundleConfig, init_bundle  # noqa: E402

URI = "file:///bench/typed.py"
GOALS = {"p50": 150.0, "p95": 300.0, "overhead": 1.1}


@dataclass
class Keystroke:
    server_s: float
    engine_s: float | None  # None: a type-ahead answer, nothing decoded to compare with
    same: bool  # the server's answer equals the engine's decode of the same request
    right: int  # characters of the file's real continuation the server's answer starts with
    decode_right: int  # the same for the engine's decode
    tokens: int  # tokens the engine's decode generated
    stop: str | None  # why the server's decode stopped (umbra/stats "stops"); None: a type-ahead answer


def chars_right(shown: str, truth: str) -> int:
    """How many characters of `shown` the file really goes on with (accepting that much is right)."""
    n = 0
    while n < min(len(shown), len(truth)) and shown[n] == truth[n]:
        n += 1
    return n


class Server:
    """The real language server over stdio, through pygls's client."""

    def __init__(self, options: dict, log: Path):
        self.options, self.log = options, log
        self.client = LanguageClient("umbra-keystroke-bench", "1")
        self.state = asyncio.get_running_loop().create_future()
        self.text, self.version = "", 1

        @self.client.feature(STATUS_METHOD)
        def on_status(ls, params):
            state = getattr(params, "state", None)
            if state in ("ready", "error", "unreachable") and not self.state.done():
                self.state.set_result((state, getattr(params, "message", "")))

    async def start(self) -> None:
        await self.client.start_io(sys.executable, "-m", "lsp", cwd=str(ROOT))
        self._drain = asyncio.ensure_future(self._drain_stderr())
        await self.client.initialize_async(types.InitializeParams(
            capabilities=types.ClientCapabilities(), initialization_options=self.options))
        self.client.initialized(types.InitializedParams())
        state, message = await asyncio.wait_for(self.state, 600)
        if state != "ready":
            raise SystemExit(f"the language server is {state}: {message} (log: {self.log})")

    async def _drain_stderr(self) -> None:
        with open(self.log, "ab") as out:
            while line := await self.client._server.stderr.readline():
                out.write(line)

    def open(self, text: str) -> None:
        self.text = text
        self.client.text_document_did_open(types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=URI, language_id="python", version=1, text=text)))

    def type(self, at: int, char: str) -> types.InlineCompletionParams:
        """Send the didChange typing `char` at offset `at`; the request to send next."""
        pos = Document(self.text).position(at)
        self.version += 1
        self.client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=URI, version=self.version),
            content_changes=[types.TextDocumentContentChangePartial(range=types.Range(start=pos, end=pos), text=char)]))
        self.text = self.text[:at] + char + self.text[at:]
        return inline_params(Document(self.text).position(at + 1))

    def send(self, params: types.InlineCompletionParams) -> asyncio.Future:
        """The inline completion request, sent now; its future answers the inserted text."""
        future = asyncio.wrap_future(self.client.protocol.send_request(types.TEXT_DOCUMENT_INLINE_COMPLETION, params))
        return asyncio.ensure_future(_text(future))

    async def complete(self, params: types.InlineCompletionParams) -> str:
        return await self.send(params)

    async def stats(self) -> dict:
        return plain(await self.client.protocol.send_request_async(STATS_METHOD, None))

    async def stop(self) -> None:
        try:
            await asyncio.wait_for(self.client.shutdown_async(None), 60)
            self.client.exit(None)
            await asyncio.wait_for(self.client.stop(), 60)
        finally:
            self._drain.cancel()


async def _text(future: asyncio.Future) -> str:
    result = await future
    return result.items[0].insert_text if result.items else ""


def inline_params(pos: types.Position) -> types.InlineCompletionParams:
    return types.InlineCompletionParams(
        text_document=types.TextDocumentIdentifier(uri=URI), position=pos,
        context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic))


def typed_region(text: str, keystrokes: int) -> int:
    """Where the typed characters start: the start of the line nearest the file's middle that
    leaves `keystrokes` characters after it."""
    starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]
    fits = [s for s in starts if s + keystrokes <= len(text) and text[s:s + 1].strip()] or [0]
    return min(fits, key=lambda s: abs(s - len(text) // 2))


async def run_mode(name: str, model: ClientModel, options: dict, text: str, start: int, args, workdir: Path) -> dict:
    settings = InitializationOptions.from_json(options)
    config = settings.inline.engine_config(settings.completion.engine_config())  # the editor's requests
    budget = settings.inline.deadline_s
    typed = text[start:start + args.keystrokes]
    base = text[:start] + text[start + args.keystrokes:]
    server = Server(options, workdir / f"lsp-{name}.log")
    async with open_middle(model, CloudConfig(threads=args.threads)) as link:
        engine = CompletionEngine.split(model, link.middle, config, context_length=link.max_seq_len)
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
    return {"strokes": strokes, "burst": burst}


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


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def summarize(name: str, run: dict) -> dict:
    """Table rows, the type-ahead's line and the goals' verdict of one mode."""
    strokes = run["strokes"]
    decoded = [k for k in strokes if k.engine_s is not None]
    ahead = [k for k in strokes if k.engine_s is None]
    every = [1000 * k.server_s for k in strokes]
    server = [1000 * k.server_s for k in decoded]
    engine = [1000 * k.engine_s for k in decoded]
    ratios = sorted(k.server_s / k.engine_s for k in decoded)
    lo, hi, _ = median_ci_ranks(len(ratios))
    ratio = statistics.median(ratios)

    def goal(value: float, limit: float, unit: str) -> str:
        return f"{value:.{2 if unit == '×' else 0}f}{unit} ({'held' if value <= limit else 'missed'})"

    return {
        "row": f"| {name} | {len(strokes)} | {len(ahead)} | {pct(every, 50):.0f} | {pct(every, 90):.0f} "
               f"| {pct(every, 95):.0f} | {max(every):.0f} |",
        "overhead": f"| {name} | {len(decoded)} | {pct([k.tokens for k in decoded], 50):.0f} / "
                    f"{pct([k.tokens for k in decoded], 95):.0f} "
                    f"| {pct(server, 50):.0f} / {pct(server, 95):.0f} | {pct(engine, 50):.0f} / {pct(engine, 95):.0f} "
                    f"| {ratio:.2f}× [{ratios[lo]:.2f}, {ratios[hi]:.2f}] "
                    f"| {sum(k.same for k in decoded)} / {len(decoded)} |",
        "stops": f"{name}: " + ", ".join(f"{reason} {count}" for reason, count in
                                         sorted(Counter(k.stop for k in decoded).items(), key=lambda rc: -rc[1])),
        "ahead": f"{name}: {len(ahead)} type-ahead answers, {sum(k.same for k in ahead)} of them equal to a "
                 f"decode of the same request; of the file's next characters they got "
                 f"{sum(k.right for k in ahead):,} right, the decodes {sum(k.decode_right for k in ahead):,}",
        "verdict": f"{name}: every keystroke p50 {goal(pct(every, 50), GOALS['p50'], ' ms')}, p95 "
                   f"{goal(pct(every, 95), GOALS['p95'], ' ms')}; the decoded keystrokes alone p50 "
                   f"{goal(pct(server, 50), GOALS['p50'], ' ms')}, p95 {goal(pct(server, 95), GOALS['p95'], ' ms')}; "
                   f"overhead {goal(ratio, GOALS['overhead'], '×')}",
    }


def report(runs: dict[str, dict], args, path: str, started: str) -> str:
    modes = {name: summarize(name, run) for name, run in runs.items()}
    bursts = "; ".join(f"{name}: {r['burst']['n']} keystrokes sent without waiting, {r['burst']['started']} decodes "
                       f"started ({r['burst']['skipped']} requests skipped as already superseded), at most {r['burst']['max_per_document']} at once in the document, the last "
                       f"{'answered' if r['burst']['answered'] else 'NOT answered'} "
                       f"{r['burst']['last_ms']:.0f} ms after the burst was sent" for name, r in runs.items())
    return "\n".join([
        f"Measured {started}: `python benchmarks/keystroke.py --keystrokes {args.keystrokes} --threads {args.threads}"
        f"{' --runs ' + args.runs if args.runs != 'plain,bundle' else ''}`, typing `{path}` "
        f"({args.keystrokes} characters from the line nearest its middle), default model, default `completion` "
        f"and `inline` options, bundle seed {args.bundle_seed}, torch threads {args.threads} per process. "
        f"Machine: {describe()}; {platform.machine()} (torch {torch.__version__}). {args.note}".rstrip(),
        "",
        "Keystroke to inline completion, ms (every keystroke; the client waits for each answer):",
        "",
        "| mode | keystrokes | type-ahead answers | p50 | p90 | p95 | max |",
        "|---|---:|---:|---:|---:|---:|---:|",
        *(m["row"] for m in modes.values()),
        "",
        "The decoded keystrokes against the engine alone on the same requests (ms, p50 / p95):",
        "",
        "| mode | decoded | tokens / decode (p50 / p95) | server | engine | server / engine, median [95 % CI] "
        "| same answer |",
        "|---|---:|---:|---:|---:|---:|---:|",
        *(m["overhead"] for m in modes.values()),
        "",
        "Why the server's decodes stopped: " + "; ".join(m["stops"] for m in modes.values()) + ".",
        "",
        "Type-ahead: " + "; ".join(m["ahead"] for m in modes.values()) + ".",
        "",
        f"Goals (p50 ≤ {GOALS['p50']:.0f} ms, p95 ≤ {GOALS['p95']:.0f} ms, overhead ≤ {GOALS['overhead']}×): "
        + "; ".join(m["verdict"] for m in modes.values()) + ".",
        "",
        f"Burst: {bursts}.",
    ])


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
    with tempfile.TemporaryDirectory(prefix="umbra-keystroke-") as tmp:
        workdir = Path(tmp)
        for mode in args.runs.split(","):
            if mode == "plain":
                options = {"model": {"dir": str(base_dir)}, "threads": args.threads}
                model = ClientModel.load(base_dir)
                runs["no bundle"] = await run_mode("plain", model, options, text, start, args, workdir)
            elif mode == "bundle":
                store, service = keyring()
                try:
                    bundle = workdir / "bundle"
                    manifest = init_bundle(base_dir, BundleConfig(seed=args.bundle_seed), bundle, store=store)
                    options = {"model": {"bundle": str(bundle), "dir": str(base_dir), "keyringService": store.service},
                               "threads": args.threads}
                    model = ClientModel.from_bundle(bundle, base_dir, store=store)
                    name = f"bundle (NOIR ε={manifest.epsilon:g})"
                    runs[name] = await run_mode("bundle", model, options, text, start, args, workdir)
                finally:
                    for name in store.list():
                        store.delete(name)
                    if service is not None:
                        service.stop()
            else:
                raise SystemExit(f"unknown run {mode!r} (plain, bundle)")
    body = report(runs, args, args.path, started)
    print(body)
    if args.write:
        write_block(ROOT / "docs/benchmarks.md", "keystroke", body)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
