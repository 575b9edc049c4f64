"""`umbra train pretrain`: the pretraining loop with exact resume, validation, logs and export."""

from __future__ import annotations

import contextlib
import logging
import signal
import time
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from umbra.data.contamination import check_disjoint
from umbra.data.corpus import LANGS, corpus_file, read_documents, read_split
from umbra.errors import ConfigError
from umbra.training.checkpoint import CHECKPOINT_NAME, TrainState, load_checkpoint, restore, save_checkpoint
from umbra.training.config import TrainConfig
from umbra.training.hardware import native_bf16
from umbra.training.evaluate import evaluate_languages
from umbra.training.export import export_model, provenance, read_init
from umbra.training.model import build_model, count_params
from umbra.training.packing import PackedStream, StreamSpec, eval_blocks, load_raw_tokenizer
from umbra.training.plot import plot_run
from umbra.training.runlog import TRAIN_FIELDS, VALID_FIELDS, CsvLog, read_schedule_changes
from umbra.training.schedule import lr_at

log = logging.getLogger(__name__)


@dataclass
class RunResult:
    state: TrainState  # position reached
    losses: list[float] = field(default_factory=list)  # training loss of each step of this run
    finished: bool = False  # the whole schedule is done (and the model was exported)
    interrupted: bool = False  # stopped by SIGTERM / SIGINT (after checkpointing)


class StopOnSignal:
    """Turns SIGTERM / SIGINT into a flag the loop checks between steps."""

    def __init__(self) -> None:
        self.requested = False
        self._old: dict = {}

    def _handle(self, signum, frame) -> None:
        self.requested = True

    def __enter__(self) -> StopOnSignal:
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._old[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)


def make_optimizer(model, cfg: TrainConfig) -> torch.optim.AdamW:
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=1e-8)


def _autocast(bf16: bool):
    return torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()


def _validation_sets(cfg: TrainConfig, tok) -> dict[str, np.ndarray]:
    sets = {}
    for lang in LANGS:
        if corpus_file(cfg.corpus_dir, "valid", lang).exists():
            docs = list(read_documents(cfg.corpus_dir, "valid", lang))
            blocks = eval_blocks(docs, tok, cfg.model.context_length, cfg.eval_tokens_per_lang)
            if len(blocks):
                sets[lang] = blocks
    return sets


class Trainer:
    def __init__(self, cfg: TrainConfig, enforce_limits: bool = True):
        self.cfg = cfg
        torch.set_num_threads(cfg.threads)
        if cfg.heldout_dir is not None and cfg.heldout_dir.is_dir():  # never train on the benchmark's code
            check_disjoint(cfg.corpus_dir, cfg.heldout_dir, near_dup=False)
        tok = load_raw_tokenizer(cfg.tokenizer_dir)
        if tok.get_vocab_size() > cfg.model.vocab_size:
            raise ConfigError(f"tokenizer has {tok.get_vocab_size()} tokens, model only {cfg.model.vocab_size}")
        spec = StreamSpec(cfg.seed, cfg.model.context_length, cfg.fim, cfg.repo)
        self.stream = PackedStream(read_split(cfg.corpus_dir, "train"), tok, spec, cfg.out_dir / "data")
        self.valid = _validation_sets(cfg, tok)
        torch.manual_seed(cfg.seed)
        self.model = build_model(cfg.model, enforce_limits)
        self.optimizer = make_optimizer(self.model, cfg)
        # the training forward: the model itself, or its compiled wrapper (same parameters)
        self.forward = torch.compile(self.model) if cfg.compile else self.model
        self.ckpt_path = cfg.out_dir / CHECKPOINT_NAME
        self.train_log = CsvLog(cfg.out_dir / "train_log.csv", TRAIN_FIELDS)
        self.valid_log = CsvLog(cfg.out_dir / "valid_log.csv", VALID_FIELDS)
        self.state = TrainState()

    def resume(self) -> None:
        payload = load_checkpoint(self.ckpt_path)
        if payload["config"]["model"] != self.cfg.to_dict()["model"]:
            raise ConfigError("the checkpoint's model config differs from the requested one")
        self.state = restore(payload, self.model, self.optimizer)
        log.info("resumed at step %d (%d tokens)", self.state.step, self.state.tokens_seen)

    def checkpoint(self) -> None:
        save_checkpoint(self.ckpt_path, self.model, self.optimizer, self.state, self.cfg.to_dict())
        self.plot()

    def plot(self) -> None:
        plot_run(self.train_log.read(), self.valid_log.read(), self.cfg.out_dir / "curves.png")

    def step(self) -> tuple[float, float, float]:
        cfg, st = self.cfg, self.state
        blocks, st.epoch, st.block = self.stream.batch(st.epoch, st.block, cfg.batch_size)
        ids = torch.from_numpy(blocks.astype(np.int64))
        lr = lr_at(st.step, cfg.lr, cfg.warmup_steps, cfg.total_steps(), cfg.min_lr_ratio)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        with _autocast(cfg.bf16):
            loss = self.forward(input_ids=ids, labels=ids).loss
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        st.step += 1
        st.tokens_seen += ids.numel()
        return loss.item(), lr, float(grad_norm)

    def validate(self) -> None:
        metrics = evaluate_languages(self.model, self.valid, self.cfg.batch_size, self.cfg.bf16)
        for lang, m in metrics.items():
            self.valid_log.append({"step": self.state.step, "tokens_seen": self.state.tokens_seen,
                                   "lang": lang, "loss": f"{m.loss:.5f}", "top1": f"{m.top1:.5f}",
                                   "tokens": m.tokens})
            log.info("step %d valid %s loss %.4f top1 %.4f", self.state.step, lang, m.loss, m.top1)
        self.plot()

    def run(self) -> RunResult:
        cfg = self.cfg
        total = cfg.total_steps()
        stop_at = min(total, cfg.stop_at_step) if cfg.stop_at_step is not None else total
        self.train_log.truncate_after(self.state.step)
        self.valid_log.truncate_after(self.state.step)
        log.info("model: %d parameters; %d steps of %d tokens", count_params(self.model), total,
                 cfg.tokens_per_step())
        result = RunResult(self.state)
        last_ckpt = time.monotonic()
        self.model.train()
        with StopOnSignal() as stop:
            while self.state.step < stop_at and not stop.requested:
                t0 = time.monotonic()
                loss, lr, grad_norm = self.step()
                dt = time.monotonic() - t0
                self.state.elapsed_s += dt
                result.losses.append(loss)
                self.train_log.append({
                    "step": self.state.step, "tokens_seen": self.state.tokens_seen,
                    "lr": f"{lr:.6g}", "loss": f"{loss:.5f}", "grad_norm": f"{grad_norm:.4f}",
                    "elapsed_s": f"{self.state.elapsed_s:.1f}", "tokens_per_s": f"{cfg.tokens_per_step() / dt:.0f}"})
                if self.state.step % cfg.eval_every_steps == 0 and self.valid:
                    self.validate()
                if time.monotonic() - last_ckpt >= cfg.checkpoint_minutes * 60:
                    self.checkpoint()
                    last_ckpt = time.monotonic()
            result.interrupted = stop.requested
            self.checkpoint()
        if self.state.step >= total:
            if self.valid and self.state.step % cfg.eval_every_steps != 0:
                self.validate()
            export_model(self.model, cfg.export_dir, cfg.tokenizer_dir,
                         provenance(cfg.to_dict(), asdict(self.state), total,
                                    read_schedule_changes(cfg.out_dir), read_init(cfg.out_dir)),
                         cfg.out_dir / "curves.png")
            result.finished = True
        return result


def pretrain(cfg: TrainConfig, resume: bool = False, enforce_limits: bool = True) -> RunResult:
    """Train (or resume) according to `cfg`; refuses to overwrite an existing run unless resuming."""
    if cfg.bf16 and not native_bf16():
        log.warning("bf16 autocast on a CPU without native bfloat16 matmul (no avx512_bf16 / amx_bf16) "
                    "runs far slower than fp32; pass --fp32 (on --resume it continues the run in fp32)")
    trainer = Trainer(cfg, enforce_limits)
    if resume:
        trainer.resume()
    elif trainer.ckpt_path.exists():
        raise ConfigError(f"{trainer.ckpt_path} exists: pass --resume or use another --out-dir")
    return trainer.run()
