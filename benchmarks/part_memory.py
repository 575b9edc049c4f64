"""Peak memory of loading one part of a model directory, in this process alone.

    python benchmarks/part_memory.py DIR {encoder,middle,decoder,client} DTYPE [--encoder-blocks E --decoder-blocks D]

Prints one JSON line: the part's bytes as loaded (`part_bytes`), the resident set before the load
(`before`; torch imported, the meta device warmed up), its peak once loaded (`peak_after_load`) and
after `--forward T` positions (`peak`; VmHWM after resetting it through /proc/self/clear_refs) and
`peak_delta` = peak - before. Linux only."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from torch import nn


def status_bytes(field: str) -> int:
    """A /proc/self/status size field (VmRSS, VmHWM) in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise SystemExit(f"no {field} in /proc/self/status")


def reset_peak() -> int:
    """Reset VmHWM to the current resident set; returns that."""
    Path("/proc/self/clear_refs").write_text("5")
    return status_bytes("VmRSS")


def main(argv: list[str] | None = None) -> int:
    from umbra.engine import ClientModel
    from umbra.model.loader import Checkpoint, load_part
    from umbra.model.parts import SplitPlan
    from umbra.model.spec import load_spec

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dir", type=Path)
    p.add_argument("part", choices=["encoder", "middle", "decoder", "client"])
    p.add_argument("dtype", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--encoder-blocks", type=int)
    p.add_argument("--decoder-blocks", type=int)
    p.add_argument("--forward", type=int, default=0, metavar="T",
                   help="client: then run T positions through encoder and decoder (a weight checkpointed in "
                        "the asked dtype stays mapped from its file until it is first read: this reads them all)")
    args = p.parse_args(argv)
    dtype = getattr(torch, args.dtype)
    spec = load_spec(args.dir)
    plan = SplitPlan(args.encoder_blocks, args.decoder_blocks) if args.encoder_blocks else None
    with torch.device("meta"):
        nn.Linear(2, 2)  # the meta device's one-time registrations, outside the measurement
    before = reset_peak()
    if args.part == "client":  # what `umbra complete` / `umbra serve` load: tokenizer + both client parts
        model = ClientModel.load(args.dir, plan, dtype)
        parts = [model.encoder, model.decoder]
    else:
        parts = [load_part(args.dir, args.part, plan, dtype, spec, Checkpoint(args.dir))]
    loaded = status_bytes("VmHWM")
    if args.forward and args.part == "client":
        ids = torch.randint(0, model.tokenizer.size, (1, args.forward))
        pos = torch.arange(args.forward)[None]
        with torch.no_grad():
            model.decoder(model.encoder(ids, pos, model.encoder.stack.new_cache()), pos,
                          model.decoder.stack.new_cache(), last_only=True)
    peak = status_bytes("VmHWM")
    nbytes = sum(t.numel() * t.element_size() for m in parts for t in m.state_dict().values())
    print(json.dumps({"part": args.part, "dtype": args.dtype, "part_bytes": nbytes, "before": before,
                      "peak_after_load": loaded, "peak": peak, "peak_delta": peak - before}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
