"""`umbra complete FILE:LINE:COL` — print the completion at a position (1-based, like editors).

Split by default: the client runs the first E and last D blocks and the middle runs in the
cloud given by `--cloud URL` (or UMBRA_CLOUD_URL), whose token comes from `--token`, else the OS
keyring entry stored by `umbra keys cloud-token set URL`, else UMBRA_CLOUD_TOKEN. With no cloud
configured it starts the real cloud service on 127.0.0.1 for the duration of the command and
still goes over the network. `--local` runs the whole model in this process (the monolithic
baseline; nothing is sent anywhere). `--client-only` completes with the client's own blocks
alone, the middle skipped (umbra/engine/client_only.py): no cloud is started, looked up or
connected to, nothing is sent anywhere — the privacy-first choice, at the client blocks' quality.

`--bundle DIR` (or UMBRA_BUNDLE) completes with a client bundle made by `umbra init`: private
token ids, the INDVocab-randomized embedding and the permuted LM head, its key from the OS
keyring. The cloud still runs the base model's public middle blocks; `--model` then names that
base model (default: the directory the bundle was made from).

The privacy mode in force (docs/privacy/mode.md) is printed to stderr once. A cloud not on this
machine receives only a defended mode unless --allow-undefended-remote-cloud says otherwise."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from umbra.cli.cloud_args import add_cloud_args, cloud_config
from umbra.engine.config import EngineConfig, PromptConfig, SamplingConfig, StopConfig
from umbra.errors import ConfigError
from umbra.paths import default_model_dir

if TYPE_CHECKING:  # torch and the model code load when a completion runs, not for --help
    from umbra.connect import CloudConfig
    from umbra.engine import ClientModel
    from umbra.model.parts import SplitPlan

_D = EngineConfig()


def register(sub) -> None:
    p = sub.add_parser("complete", help="print the completion at FILE:LINE:COL",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("position", metavar="FILE:LINE:COL", help="cursor position, line and column 1-based")
    p.add_argument("--model", type=Path, default=None,
                   help="Hugging Face model directory (default: models/umbra-code-tiny in the repo; "
                        "with --bundle: the base model, default the one the bundle was made from)")
    p.add_argument("--bundle", type=Path, default=None, metavar="DIR",
                   help="client bundle to complete with (env UMBRA_BUNDLE; see `umbra init`)")
    p.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32",
                   help="the client's compute dtype, and the hidden states' on the wire; a cloud started "
                        "here computes the middle in it too (default fp32)")
    p.add_argument("--service", default=None,
                   help="keyring service holding the bundle's key and the cloud's token (default: umbra)")
    where = p.add_argument_group("where the middle blocks run")
    add_cloud_args(where)
    where.add_argument("--local", action="store_true",
                       help="run the whole model in-process (monolithic baseline, for comparison)")
    where.add_argument("--client-only", action="store_true",
                       help="the client's blocks alone, the middle skipped: no cloud at all, nothing sent anywhere")
    where.add_argument("--encoder-blocks", "-E", type=int, default=None, help="client blocks before the wire")
    where.add_argument("--decoder-blocks", "-D", type=int, default=None, help="client blocks after the wire")
    gen = p.add_argument_group("generation")
    gen.add_argument("--max-tokens", type=int, default=_D.stop.max_tokens)
    gen.add_argument("--multiline", action=argparse.BooleanOptionalAction, default=_D.stop.multiline,
                     help="complete a block instead of the current line")
    gen.add_argument("--temperature", type=float, default=_D.sampling.temperature, help="0 = greedy")
    gen.add_argument("--top-p", type=float, default=_D.sampling.top_p)
    gen.add_argument("--seed", type=int, default=_D.sampling.seed)
    gen.add_argument("--budget", type=int, default=_D.prompt.budget, help="context tokens in the prompt")
    gen.add_argument("--prefix-share", type=float, default=_D.prompt.prefix_share)
    p.add_argument("--threads", type=int, default=None,
                   help="torch intra-op threads, here and in a cloud this command starts (default: torch's)")
    p.add_argument("--language", default=None,
                   help="the file's language, picking a bundle's expert (default: from the file extension; "
                        "aliases such as py or golang work)")
    p.add_argument("--json", action="store_true", help="print the completion and its statistics as JSON")
    p.set_defaults(func=run)


def parse_position(spec: str) -> tuple[Path, int, int]:
    """"path/to/file.py:12:5" -> (path, 12, 5); the path itself may contain colons."""
    parts = spec.rsplit(":", 2)
    if len(parts) != 3 or not parts[0]:
        raise ConfigError(f"position must be FILE:LINE:COL, got {spec!r}")
    try:
        line, col = int(parts[1]), int(parts[2])
    except ValueError:
        raise ConfigError(f"LINE and COL must be integers in {spec!r}") from None
    return Path(parts[0]), line, col


def split_at(text: str, line: int, col: int) -> tuple[str, str]:
    """(prefix, suffix) of `text` at 1-based `line` and `col` (col may be one past the line)."""
    lines = text.split("\n")
    if not 1 <= line <= len(lines):
        raise ConfigError(f"line {line} is outside the file (1..{len(lines)})")
    width = len(lines[line - 1].rstrip("\r"))
    if not 1 <= col <= width + 1:
        raise ConfigError(f"column {col} is outside line {line} (1..{width + 1})")
    offset = sum(len(s) + 1 for s in lines[: line - 1]) + col - 1
    return text[:offset], text[offset:]


def _config(args) -> EngineConfig:
    return EngineConfig(
        prompt=PromptConfig(budget=args.budget, prefix_share=args.prefix_share),
        sampling=SamplingConfig(temperature=args.temperature, top_p=args.top_p, seed=args.seed),
        stop=StopConfig(max_tokens=args.max_tokens, multiline=args.multiline),
    ).validate()


def _plan(args) -> SplitPlan | None:
    if args.encoder_blocks is None and args.decoder_blocks is None:
        return None
    if args.encoder_blocks is None or args.decoder_blocks is None:
        raise ConfigError("give both --encoder-blocks and --decoder-blocks, or neither")
    from umbra.model.parts import SplitPlan

    return SplitPlan(args.encoder_blocks, args.decoder_blocks)


def run(args) -> int:
    path, line, col = parse_position(args.position)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    prefix, suffix = split_at(text, line, col)
    config = _config(args)
    if args.local and args.client_only:
        raise ConfigError("--local and --client-only are two different models; give one")
    for flag in ("local", "client_only"):
        if getattr(args, flag) and (args.cloud or args.token or args.cloud_cert):
            raise ConfigError(f"--{flag.replace('_', '-')} runs without a cloud; drop --cloud/--token/--cloud-cert")
    if args.threads is not None and args.threads < 1:
        raise ConfigError("--threads must be >= 1")
    mode = "monolithic" if args.local else "client-only" if args.client_only else "split"
    cloud = None if mode != "split" else cloud_config(args, audit=None)  # audit: as `umbra audit on|off` says
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)
    model = _load_model(args)
    from umbra.engine.routing import language_of_path

    language = args.language or language_of_path(path)
    result = asyncio.run(_complete(model, config, prefix, suffix, cloud, language, mode))
    if args.json:
        stats = {k: v for k, v in asdict(result).items() if k not in ("text", "tokens")}  # no token ids
        print(json.dumps({"completion": result.text, "generated_tokens": result.generated_tokens, "mode": mode,
                          "dtype": args.dtype,
                          **stats}))
    else:
        sys.stdout.write(result.text + "\n")
    return 0


def _load_model(args) -> ClientModel:
    from umbra.engine import ClientModel

    from umbra.model.device import resolve_dtype

    dtype = resolve_dtype(args.dtype)
    bundle = args.bundle or os.environ.get("UMBRA_BUNDLE")
    if not bundle:
        return ClientModel.load(args.model or default_model_dir(), _plan(args), dtype=dtype)
    if _plan(args) is not None:
        raise ConfigError("a bundle fixes the split; drop --encoder-blocks/--decoder-blocks")
    from keys import DEFAULT_SERVICE, KeyStore

    return ClientModel.from_bundle(bundle, args.model, store=KeyStore(args.service or DEFAULT_SERVICE), dtype=dtype)


async def _complete(model: ClientModel, config, prefix, suffix, cloud: CloudConfig | None, language: str | None,
                    mode: str):
    """"monolithic" (--local) and "client-only": in process, nothing sent anywhere. "split":
    through the link (a cloud started here when no URL is configured; the audit tap when auditing)."""
    from umbra.engine import CompletionEngine

    if mode == "client-only":
        from umbra.engine.client_only import client_only_engine

        print("umbra: privacy: nothing is sent (--client-only: the client's blocks alone)", file=sys.stderr)
        return await client_only_engine(model, config).complete(prefix, suffix, language=language)
    if cloud is None:
        print("umbra: privacy: nothing is sent (--local)", file=sys.stderr)
        return await CompletionEngine.monolithic(model, config).complete(prefix, suffix, language=language)
    from umbra.connect import open_middle

    async with open_middle(model, cloud) as link:
        print(f"umbra: privacy: {link.privacy.summary}", file=sys.stderr)
        engine = CompletionEngine.split(model, link.middle, config, context_length=link.max_seq_len)
        return await engine.complete(prefix, suffix, language=language)
