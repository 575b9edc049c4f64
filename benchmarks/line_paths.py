"""The two ways benchmarks/line_completion.py completes: a warm `umbra serve` over HTTP, and the
in-process local engine as `umbra complete --local` builds it.

    async with Serve(model_dir, threads=1) as serve:                # `umbra serve --port 0` as a process
        text, seconds = await serve.complete(prefix, suffix, language, multiline, max_tokens)
    local = Local(model_dir, threads=1)                             # ClientModel + CompletionEngine.monolithic
    text, seconds = await local.complete(prefix, suffix, language, multiline, max_tokens)

Both complete greedily (temperature 0) with the server's defaults otherwise (a 1024-token
context budget, SPM/PSM as the model was trained). `umbra serve` runs from the checkout whose
`umbra` package this process imported (`code_root()`: with PYTHONPATH naming another worktree,
that one), with its self-started cloud on loopback; `serve_code_root()` asks a process started
the same way where it imports `umbra`, `lsp` and `server` from, so a run can say which code it
measured. Each request is a throw-away session (no prefix reuse between positions).
`client_only=True` measures client-only completion instead: `umbra serve --client-only` (no
cloud) and the client-only engine (umbra/engine/client_only.py) in place of the monolithic one."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

_LISTENING = re.compile(r"listening on (http://127\.0\.0\.1:\d+)")


def code_root() -> Path:
    """The checkout holding the `umbra` package this process imports."""
    import umbra

    return Path(umbra.__file__).resolve().parents[1]


def _env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith("UMBRA_LOCAL_")}


def serve_code_root() -> set[Path]:
    """Where a process started as `Serve` starts its server imports umbra, lsp and server from."""
    out = subprocess.run([sys.executable, "-c", "import umbra, lsp, server; from pathlib import Path; "
                          "print(*{Path(m.__file__).resolve().parents[1] for m in (umbra, lsp, server)}, sep='\\n')"],
                         cwd=code_root(), env=_env(), capture_output=True, text=True, timeout=120, check=True)
    return {Path(line) for line in out.stdout.split()}


def _body(prefix: str, suffix: str, language: str, multiline: bool, max_tokens: int) -> dict:
    return {"prefix": prefix, "suffix": suffix, "language": language, "multiline": multiline,
            "maxTokens": max_tokens, "temperature": 0.0}


class Serve:
    def __init__(self, model_dir: Path, threads: int, start_timeout: float = 600.0, client_only: bool = False):
        self.model_dir, self.threads, self.start_timeout = model_dir, threads, start_timeout
        self.client_only = client_only
        self.proc: subprocess.Popen | None = None
        self.http: httpx.AsyncClient | None = None
        self._tmp = tempfile.TemporaryDirectory(prefix="line-completion-")
        self.log = Path(self._tmp.name) / "serve.log"  # its last lines go into the error if it fails

    async def __aenter__(self) -> "Serve":
        token_file = Path(self._tmp.name) / "serve.token"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "umbra.cli.main", "serve", "--host", "127.0.0.1", "--port", "0",
                 "--model", str(self.model_dir), "--threads", str(self.threads), "--token-file", str(token_file),
                 *(["--client-only"] if self.client_only else [])],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=code_root(), env=_env())
        try:
            url = await self._wait(lambda: _LISTENING.search(self.log.read_text(errors="replace")), "listen")
            self.http = httpx.AsyncClient(base_url=url.group(1), timeout=300,
                                          headers={"Authorization": f"Bearer {token_file.read_text().strip()}"})
            await self._wait(self._healthy, "report ready")
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        return self

    async def _wait(self, probe, what: str):
        deadline = time.monotonic() + self.start_timeout
        while True:
            found = probe() if not asyncio.iscoroutinefunction(probe) else await probe()
            if found:
                return found
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = self.log.read_text(errors="replace").strip().splitlines()[-5:]
                raise RuntimeError(f"umbra serve did not {what}: " + " | ".join(tail))
            await asyncio.sleep(0.2)

    async def _healthy(self) -> bool:
        try:
            return (await self.http.get("/healthz")).status_code == 200
        except httpx.TransportError:
            return False

    async def complete(self, prefix: str, suffix: str, language: str, multiline: bool, max_tokens: int
                       ) -> tuple[str, float]:
        t0 = time.perf_counter()
        r = await self.http.post("/v1/infill", json=_body(prefix, suffix, language, multiline, max_tokens))
        seconds = time.perf_counter() - t0
        if r.status_code != 200:
            raise RuntimeError(f"umbra serve answered {r.status_code}: {r.text[:300]}")
        return r.json()["completion"], seconds

    async def __aexit__(self, *exc) -> None:
        if self.http is not None:
            await self.http.aclose()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: the server stops its self-started cloud on the way out
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._tmp.cleanup()


class Local:
    """`umbra complete --local`: the client model loaded as-is, all blocks in this process."""

    def __init__(self, model_dir: Path, threads: int, client_only: bool = False):
        import torch

        from umbra.engine import ClientModel, CompletionEngine
        from umbra.engine.client_only import client_only_engine

        torch.set_num_threads(threads)
        self.model = ClientModel.load(model_dir)
        self.engine = client_only_engine(self.model) if client_only else CompletionEngine.monolithic(self.model)

    @staticmethod
    def config(multiline: bool, max_tokens: int):
        """The engine config `umbra complete --local` builds from its defaults and these flags."""
        from umbra.engine import EngineConfig, PromptConfig, SamplingConfig, StopConfig

        d = EngineConfig()
        return EngineConfig(
            prompt=PromptConfig(budget=d.prompt.budget, prefix_share=d.prompt.prefix_share),
            sampling=SamplingConfig(temperature=0.0, top_p=d.sampling.top_p, seed=d.sampling.seed),
            stop=StopConfig(max_tokens=max_tokens, multiline=multiline),
        ).validate()

    async def complete(self, prefix: str, suffix: str, language: str, multiline: bool, max_tokens: int
                       ) -> tuple[str, float]:
        t0 = time.perf_counter()
        result = await self.engine.complete(prefix, suffix, self.config(multiline, max_tokens), language=language)
        return result.text, time.perf_counter() - t0

    def tokens(self, text: str) -> int:
        return len(self.model.tokenizer.encode(text))
