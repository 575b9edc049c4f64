"""What this machine charges for splitting a sequential computation between two processes, with
no Umbra code at all.

    python benchmarks/two_process_chain.py [--sizes 16+16,64+256] [--spin] [--rounds 6] [--cpu-latency-us 0]

A chain of 1024 x 1024 float32 mat-vec products (each followed by tanh) over A MB of weights,
then over B MB, repeated: once in one process, once with the B part in a second process that the
first one sends the vector to over a pipe (raw bytes) and waits for, as a split decode step does.
With `--spin` both sides busy-poll the pipe instead of sleeping on it; with
`--cpu-latency-us 0` they sleep on it but idle CPUs poll instead of halting (machine.py). Repetitions alternate
between the two and the ratio is paired per repetition (median and range). One torch thread per
process. Prints one line per size."""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import time

import torch

from machine import cpu_latency, describe

_SIDE = 1024


def _weights(megabytes: int, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    count = max(1, megabytes * 2**20 // (_SIDE * _SIDE * 4))
    return [torch.randn(_SIDE, _SIDE, generator=g) * 0.03 for _ in range(count)]


def _chain(weights: list[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    for w in weights:
        x = torch.tanh(w @ x)
    return x


def _receive(conn, spin: bool) -> bytes:
    if spin:
        while not conn.poll(0):
            pass
    return conn.recv_bytes()


def _vector(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.float32).reshape(_SIDE, 1)


def _second(conn, megabytes: int, spin: bool) -> None:
    torch.set_num_threads(1)
    weights = _weights(megabytes, 1)
    conn.send_bytes(b"ready")
    while data := _receive(conn, spin):
        conn.send_bytes(_chain(weights, _vector(data)).numpy().tobytes())


def measure(mb_a: int, mb_b: int, steps: int, rounds: int, spin: bool) -> tuple[float, float, list[float]]:
    """(one-process ms, two-process ms, paired ratios) per step of the A -> B chain."""
    torch.set_num_threads(1)
    first, second = _weights(mb_a, 0), _weights(mb_b, 1)
    ctx = mp.get_context("spawn")
    conn, child = ctx.Pipe()
    proc = ctx.Process(target=_second, args=(child, mb_b, spin), daemon=True)
    proc.start()
    conn.recv_bytes()
    x0 = torch.randn(_SIDE, 1, generator=torch.Generator().manual_seed(2))
    one, two = [], []
    for _ in range(rounds):
        x, t = x0, time.perf_counter()
        for _ in range(steps):
            x = _chain(second, _chain(first, x))
        one.append((time.perf_counter() - t) / steps)
        x, t = x0, time.perf_counter()
        for _ in range(steps):
            conn.send_bytes(_chain(first, x).numpy().tobytes())
            x = _vector(_receive(conn, spin))
        two.append((time.perf_counter() - t) / steps)
    conn.send_bytes(b"")
    proc.join(10)
    return statistics.median(one) * 1e3, statistics.median(two) * 1e3, sorted(b / a for a, b in zip(one, two))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="16+16,64+256", help="A+B megabytes of weights per side, comma-separated")
    p.add_argument("--spin", action="store_true", help="both sides busy-poll the pipe instead of sleeping")
    p.add_argument("--rounds", type=int, default=6, help="alternating repetitions")
    p.add_argument("--budget-ms", type=float, default=400.0, help="approximate time per timed run")
    p.add_argument("--cpu-latency-us", type=int, default=None,
                   help="hold this PM QoS CPU latency bound for the run (0: idle CPUs poll; needs root)")
    args = p.parse_args()
    print(f"machine: {describe(args.cpu_latency_us)}")
    with cpu_latency(args.cpu_latency_us):
        for size in args.sizes.split(","):
            _report(size, args)


def _report(size: str, args) -> None:
    mb_a, mb_b = (int(v) for v in size.split("+"))
    steps = max(10, int(args.budget_ms / (0.11 * (mb_a + mb_b))))  # ≈ 0.11 ms per MB streamed
    one, two, ratios = measure(mb_a, mb_b, steps, args.rounds, args.spin)
    print(f"A {mb_a} MB + B {mb_b} MB{' (both sides spin)' if args.spin else ''}: one process {one:.2f} ms, "
          f"two processes {two:.2f} ms per step; paired ratio median {statistics.median(ratios):.3f} "
          f"(range {ratios[0]:.3f}–{ratios[-1]:.3f}, {args.rounds} rounds)")


if __name__ == "__main__":
    main()
