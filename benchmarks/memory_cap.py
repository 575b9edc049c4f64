"""A model too large for a process's memory as a whole still serves split when each part fits
(issue 61, point 1): the real client and the real cloud, each process under a memory limit.

    python benchmarks/synthetic_model.py /work/scratch/B/syn-1.5b     # bf16, 3.09 GB; never commit it
    python benchmarks/memory_cap.py /work/scratch/B/syn-1.5b [--limit-mib N] [--max-tokens 12]

`umbra complete FILE:LINE:COL --dtype fp32` (the client: tokenizer, encoder and decoder blocks)
completes one position of a small Python file through `umbra cloud serve --device cpu --dtype fp32`
(the cloud: the middle blocks) on loopback, each in a process of its own. The checkpoint is bf16
and both sides compute in fp32, so every weight is cast while loading into private anonymous
memory, which is what the limit counts. Four runs:

  1. split, no limit: the reference completion, and each side's peak private data (VmData, what
     RLIMIT_DATA counts) and peak RSS (VmHWM), sampled from /proc every 20 ms;
  2. `--local` (the whole model in one process), no limit: what the whole model needs;
  3. split, the client and the cloud each under the limit (RLIMIT_DATA, set in each process
     before it starts);
  4. `--local` under the limit: must fail to allocate.

The limit (unless --limit-mib): halfway between the larger side's peak private data in run 1 and
the least a side would need holding the other side's part as well (its peak + that part's bytes),
so each side fits with room to spare and neither would fit with the other's blocks.
RLIMIT_DATA (Linux >= 4.7; no root needed) counts private writable mappings: anonymous memory,
and the copy-on-write mapping safetensors makes of a whole shard while one of its tensors is alive;
not shared or read-only file mappings. Linux only. Prints markdown."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from umbra.processes import end_process

ROOT = Path(__file__).resolve().parents[1]
MIB = 2**20
SOURCE = ("import os\n\n\ndef read_config(path):\n    with open(path) as f:\n        return f.read()\n\n\n"
          "def main():\n    config = read_config(\n")
POSITION = (10, 25)  # after "read_config(" on the last line


def part_bytes(model_dir: Path, plan=None, dtype: str = "float32") -> dict[str, int]:
    """Bytes of each side's weights in `dtype`, from the shard headers (nothing read)."""
    import torch

    from umbra.model.loader import Checkpoint, check_part
    from umbra.model.spec import load_spec

    size = torch.empty((), dtype=getattr(torch, dtype)).element_size()
    spec, ckpt = load_spec(model_dir), Checkpoint(model_dir)
    count = {p: check_part(model_dir, p, plan, spec, ckpt) for p in ("encoder", "middle", "decoder")}
    return {"client": (count["encoder"] + count["decoder"]) * size, "middle": count["middle"] * size}


def _status(pid: int) -> dict[str, int] | None:
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return None
    fields = {k: int(v.split()[0]) * 1024 for k, v in (ln.split(":", 1) for ln in lines) if k in ("VmData", "VmHWM")}
    return fields if len(fields) == 2 else None  # a zombie has no memory fields


def _data_limit(pid: int) -> int | None:
    """The soft RLIMIT_DATA of a running process (None: unlimited or gone)."""
    try:
        for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
            if line.startswith("Max data size"):
                soft = line.split()[3]
                return None if soft == "unlimited" else int(soft)
    except OSError:
        pass
    return None


@dataclass
class Run:
    mode: str  # "split" or "local"
    limit: int | None  # RLIMIT_DATA of the client and of the cloud, each its own, bytes
    returncode: int = -1
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0  # the client's command, from its start (the cloud already serving)
    cloud_start: float = 0.0  # seconds from the cloud's start to its /healthz answering
    peaks: dict[str, dict[str, int]] = field(default_factory=dict)  # side -> VmData / VmHWM peak
    cloud_limit: int | None = None  # the cloud's RLIMIT_DATA, read from its /proc/PID/limits
    cloud_log: str = ""

    @property
    def completion(self) -> dict | None:
        return json.loads(self.stdout.strip().splitlines()[-1]) if self.returncode == 0 else None

    @property
    def out_of_memory(self) -> bool:
        """It stopped because an allocation was refused (torch's allocator, or Python's)."""
        return self.returncode != 0 and ("can't allocate memory" in self.stderr or "MemoryError" in self.stderr)

    def error(self) -> str:
        return self.stderr.strip().splitlines()[-1] if self.returncode and self.stderr.strip() else ""


class _Sampler(threading.Thread):
    """Each watched process's peak VmData and VmHWM, read every 20 ms until stopped."""

    def __init__(self, run: Run):
        super().__init__(daemon=True)
        self.run_, self.pids, self.done = run, {}, threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            for side, pid in list(self.pids.items()):
                if (now := _status(pid)) is not None:
                    peak = self.run_.peaks.setdefault(side, {"VmData": 0, "VmHWM": 0})
                    for k, v in now.items():
                        peak[k] = max(peak[k], v)
            self.done.wait(0.02)


# sets its own soft RLIMIT_DATA, then becomes the command (exec: the same process, the limit kept)
_CAP = ("import os, resource, sys; resource.setrlimit(resource.RLIMIT_DATA, "
        "(int(sys.argv[1]), resource.getrlimit(resource.RLIMIT_DATA)[1])); os.execv(sys.argv[2], sys.argv[2:])")


def _capped(cmd: list[str], limit: int | None) -> list[str]:
    return cmd if limit is None else [sys.executable, "-c", _CAP, str(limit), *cmd]


def _env() -> dict[str, str]:
    return dict(os.environ, OMP_NUM_THREADS="1",
                PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))


def _split_args(plan) -> list[str]:
    return [] if plan is None else ["--encoder-blocks", str(plan.encoder_blocks), "--decoder-blocks",
                                    str(plan.decoder_blocks)]


@contextlib.contextmanager
def _cloud(model_dir: Path, workdir: Path, plan, limit: int | None, run: Run, sampler: _Sampler, timeout: float):
    """`umbra cloud serve` on a free loopback port under `limit`, fp32 on the CPU, one torch
    thread; yields (base URL, token) once /healthz answers, and stops it afterwards."""
    from server.auth import TokenStore
    from server.launch import wait_healthy

    tokens, ready, log = workdir / "tokens.json", workdir / "ready.json", workdir / "cloud.log"
    ready.unlink(missing_ok=True)
    token = TokenStore(tokens).add("memory-cap")
    cmd = [sys.executable, "-m", "umbra.cli.main", "cloud", "serve", "--model-dir", str(model_dir), *_split_args(plan),
           "--device", "cpu", "--dtype", "fp32", "--torch-threads", "1", "--host", "127.0.0.1", "--port", "0",
           "--token-file", str(tokens), "--ready-file", str(ready), "--exit-with-parent", str(os.getpid())]
    t0 = time.perf_counter()
    with open(log, "wb") as out:
        proc = subprocess.Popen(_capped(cmd, limit), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=ROOT, env=_env())
    sampler.pids["cloud"] = proc.pid
    try:
        deadline = time.monotonic() + timeout
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        run.cloud_limit = _data_limit(proc.pid)
        url = f"http://127.0.0.1:{json.loads(ready.read_text())['port']}" if ready.exists() else ""
        why = wait_healthy(url, proc, deadline) if url else "no ready file"
        run.cloud_start = time.perf_counter() - t0
        if why is not None:
            run.stderr = f"the cloud did not start ({why}):\n{log.read_text(errors='replace')[-3000:]}"
        yield None if why is not None else (url, token)
    finally:
        end_process(proc, grace=30)
        run.cloud_log = log.read_text(errors="replace")


def complete(model_dir: Path, workdir: Path, *, local: bool = False, limit: int | None = None, plan=None,
             max_tokens: int = 12, timeout: float = 1800) -> Run:
    """`umbra complete` at POSITION of SOURCE (written under `workdir`) in fp32, one torch thread
    per process: split through a cloud started here (`umbra cloud serve`), or --local; the client
    and the cloud each under RLIMIT_DATA `limit` (None: none)."""
    source = workdir / "complete_me.py"
    source.write_text(SOURCE)
    cmd = [sys.executable, "-m", "umbra.cli.main", "complete", f"{source}:{POSITION[0]}:{POSITION[1]}",
           "--model", str(model_dir), "--dtype", "fp32", "--threads", "1", "--max-tokens", str(max_tokens), "--json",
           *_split_args(plan)] + (["--local"] if local else [])
    run = Run("local" if local else "split", limit)
    sampler = _Sampler(run)
    sampler.start()
    try:
        with contextlib.ExitStack() as stack:
            if not local:
                cloud = stack.enter_context(_cloud(model_dir, workdir, plan, limit, run, sampler, timeout))
                if cloud is None:  # run.stderr says why
                    return run
                cmd += ["--cloud", cloud[0], "--token", cloud[1]]
            t0 = time.perf_counter()
            proc = subprocess.Popen(_capped(cmd, limit), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    cwd=ROOT, env=_env())
            sampler.pids["client"] = proc.pid
            try:
                run.stdout, run.stderr = proc.communicate(timeout=timeout)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            run.returncode, run.seconds = proc.returncode, time.perf_counter() - t0
    finally:
        sampler.done.set()
        sampler.join()
    return run


def limit_window(reference: Run, parts: dict[str, int]) -> tuple[int, int]:
    """(what the larger side needed, the least a side holding the other side's part as well would
    need), from the unlimited split run's sampled peaks of private data and the parts' bytes."""
    client, cloud = reference.peaks["client"]["VmData"], reference.peaks["cloud"]["VmData"]
    return max(client, cloud), min(client + parts["middle"], cloud + parts["client"])


def default_limit(reference: Run, parts: dict[str, int]) -> int:
    """Halfway through `limit_window`: room for what a sampled peak misses, none for the other
    side's blocks (nor for the whole model, which needs more than the window's top)."""
    low, high = limit_window(reference, parts)
    return (low + high) // 2


def _mib(x: int | None) -> str:
    return "-" if x is None else f"{x / MIB:.0f}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", type=Path)
    p.add_argument("--limit-mib", type=int, default=None, help="RLIMIT_DATA of each process (default: see above)")
    p.add_argument("--max-tokens", type=int, default=12)
    p.add_argument("--encoder-blocks", "-E", type=int, default=None)
    p.add_argument("--decoder-blocks", "-D", type=int, default=None)
    args = p.parse_args(argv)
    from umbra.model.parts import SplitPlan

    plan = SplitPlan(args.encoder_blocks, args.decoder_blocks) if args.encoder_blocks else None
    parts = part_bytes(args.model, plan)
    with tempfile.TemporaryDirectory(prefix="memory-cap-") as tmp:
        work = Path(tmp)
        runs = [complete(args.model, work, plan=plan, max_tokens=args.max_tokens),
                complete(args.model, work, local=True, plan=plan, max_tokens=args.max_tokens)]
        limit = args.limit_mib * MIB if args.limit_mib else default_limit(runs[0], parts)
        runs += [complete(args.model, work, limit=limit, plan=plan, max_tokens=args.max_tokens),
                 complete(args.model, work, local=True, limit=limit, plan=plan, max_tokens=args.max_tokens)]
    reference = runs[0].completion
    print(f"model {args.model}: parts in fp32 client {_mib(parts['client'])} MiB, middle {_mib(parts['middle'])} MiB, "
          f"whole {_mib(sum(parts.values()))} MiB; limit (RLIMIT_DATA per process) {_mib(limit)} MiB; "
          f"load {os.getloadavg()[0]:.1f}\n")
    print("| run | limit (MiB) | client data / RSS peak (MiB) | cloud data / RSS peak (MiB) | cloud's limit (MiB) "
          "| outcome | cloud start / client s |\n|---|---:|---:|---:|---:|---|---:|")
    for r in runs:
        c, m = r.peaks.get("client", {}), r.peaks.get("cloud", {})
        if r.returncode == 0:
            same = r.completion["completion"] == reference["completion"] if reference else False
            outcome = f"completed, {r.completion['generated_tokens']} tokens, " + \
                      ("the same as split unlimited" if same else f"DIFFERENT: {r.completion['completion']!r}")
        else:
            outcome = ("out of memory: " if r.out_of_memory else f"exit {r.returncode}: ") + r.error()[:160]
        print(f"| {r.mode} | {_mib(r.limit)} | {_mib(c.get('VmData'))} / {_mib(c.get('VmHWM'))} | "
              f"{_mib(m.get('VmData'))} / {_mib(m.get('VmHWM'))} | {_mib(r.cloud_limit)} | {outcome} | "
              f"{f'{r.cloud_start:.0f} / ' if r.mode == 'split' else ''}{r.seconds:.0f} |")
    if reference:
        print(f"\nreference completion: {reference['completion']!r}")
    for r in runs:
        budget = [ln.split("umbra.cloud: ", 1)[-1] for ln in r.cloud_log.splitlines() if "KV budget" in ln]
        if budget:
            print(f"cloud ({r.mode}, limit {_mib(r.limit)} MiB): {budget[0]}")
    ok = (runs[0].returncode == 0 and runs[2].completion is not None
          and runs[2].completion["completion"] == reference["completion"] and runs[3].out_of_memory)
    print(f"\nsplit under the limit completes the same, the whole model under it cannot load: {ok}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
