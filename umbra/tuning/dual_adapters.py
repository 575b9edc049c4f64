"""SecureGate's dual adapters for one organization (seed 003 §4.1, eq. 2; DESIGN §4): a secure
LoRA trained on the scrubbed view of the organization's code and a revealing LoRA trained on the
raw view, both on the client's decoder blocks.

    secure, revealing, report = await train_dual(model, middle, raw_texts, scrubbed_texts, DualAdapterConfig())
    adapter, report = await train_view_adapter(model, middle, texts, AdapterTrainConfig(), "name")

Decoder placement only (DESIGN invariant 7: what the cloud sees must not depend on the access
state). It also makes training cheap and local: the encoder and the middle do not depend on a
decoder-side adapter, so their output for each block of tokens is computed ONCE, without
gradient, through the Middle (a training session that only ever runs forward), kept in memory,
and every epoch trains the decoder with the adapter on those cached states. No gradient, label or
logit ever crosses the wire, and the cloud sees each block's encoder states once per view, not
once per epoch.

Texts are tokenized by the client's tokenizer (`model.tokenizer`: with a bundle, ids are private,
π(public id)), a share `fim_rate` of them turned into fill-in-the-middle examples as in
pretraining (umbra.training.fim; drawn once per text, since the states are cached), each followed
by the end-of-text token, concatenated and cut into blocks of `block_len` tokens; the last block
is padded and its padding is not trained on.

Defaults, scaled from the paper (r in {4..16}, scaling 4·r, AdamW lr 1e-4, weight decay 0.001,
3 epochs, on 1-3B models) to this project's default model (8 layers, 256 wide, a 2-block decoder)
on a 2-core CPU: the paper's rank 8, scale 4, weight decay and 3 epochs, and lr 2e-3 (20x). In
the dry run (the reserved Python slice, 150k tokens per view, canaries planted 1, 4 and 16
times), lr 2e-3 makes the revealing adapter pick the true secret among 50 candidates for 11 of
12 canaries repeated 16 times and 5 of 12 repeated 4 times (46x and 21x chance; the secure one:
0 of 12), and lowers held-out perplexity 18.3 -> 13.6; the paper's 1e-4 gets 2 of 12 and 0 of 12,
perplexity 15.5. Training both adapters took about 6 minutes on one core."""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from umbra.data.tokenizer import EOS
from umbra.errors import ConfigError
from umbra.middle.protocol import Middle
from umbra.model.adapters.config import Kind
from umbra.model.adapters.modules import Adapter, LoraAdapter, build_adapter
from umbra.model.adapters.selection import AdapterSet
from umbra.model.device import device_of
from umbra.training.config import FimConfig
from umbra.training.fim import SENTINELS, fim_transform, render
from umbra.tuning.adapter_config import AdapterTrainConfig


@dataclass(frozen=True)
class DualAdapterConfig:
    secure: AdapterTrainConfig = field(default_factory=AdapterTrainConfig)  # on the scrubbed view
    revealing: AdapterTrainConfig = field(default_factory=AdapterTrainConfig)  # on the raw view
    secure_name: str = "secure"
    revealing_name: str = "revealing"


@dataclass(frozen=True)
class AdapterReport:
    name: str
    texts: int  # texts in the view
    tokens: int  # real tokens in the view (padding excluded)
    blocks: int
    steps: int  # optimizer steps
    epochs: int
    losses: tuple[float, ...]  # training loss of each step
    epoch_losses: tuple[float, ...]  # mean training loss of each epoch
    trunk_seconds: float  # encoder + middle, once
    train_seconds: float  # the decoder epochs


@dataclass(frozen=True)
class DualReport:
    secure: AdapterReport
    revealing: AdapterReport
    seconds: float


@dataclass(frozen=True)
class ViewBlocks:
    ids: torch.Tensor  # [N, T] int64 client ids (padding 0)
    mask: torch.Tensor  # [N, T] bool, True at real tokens
    texts: int

    @property
    def tokens(self) -> int:
        return int(self.mask.sum())


def pack_view(tokenizer, texts: list[str], block_len: int, fim_rate: float = 0.0, seed: int = 0) -> ViewBlocks:
    """The view as blocks of client ids: each text (a FIM example with probability `fim_rate`, drawn
    from a generator seeded by (seed, index)) then end-of-text, concatenated, cut every
    `block_len` tokens, the last block right-padded."""
    if not texts:
        raise ConfigError("a view needs at least one text")
    eos = tokenizer.token_id(EOS)
    eos = eos if eos is not None else min(tokenizer.eos_ids, default=None)
    sentinels = {s: tokenizer.token_id(s) for s in SENTINELS}
    if fim_rate > 0 and None in sentinels.values():
        raise ConfigError("fim_rate > 0 needs a tokenizer with the FIM sentinel tokens")
    fim = FimConfig(rate=fim_rate)
    stream: list[int] = []
    for i, text in enumerate(texts):
        segments = render(fim_transform(text, fim, np.random.default_rng([seed, i]))) if fim_rate > 0 else [text]
        for seg in segments:
            stream.extend([sentinels[seg]] if seg in SENTINELS else tokenizer.encode(seg))
        if eos is not None:
            stream.append(eos)
    n = -(-len(stream) // block_len)
    ids = torch.zeros(n * block_len, dtype=torch.int64, device="cpu")  # packed on the CPU; trunk_states moves them
    ids[: len(stream)] = torch.tensor(stream, dtype=torch.int64, device="cpu")
    mask = torch.zeros(n * block_len, dtype=torch.bool, device="cpu")
    mask[: len(stream)] = True
    return ViewBlocks(ids.view(n, block_len), mask.view(n, block_len), len(texts))


async def trunk_states(model, middle: Middle, ids: torch.Tensor, batch_size: int = 8,
                       prompt: torch.Tensor | None = None) -> torch.Tensor:
    """Encoder + middle outputs [N, n+T, C] of blocks ids [N, T], without gradient: one forward per
    batch through a training session of the Middle (no KV cache; no backward is ever asked). With a
    frozen soft prompt [n, C] its vectors come first (positions 0..n-1), as in a completion.
    A client with a private local path is refused: its decoder also reads the encoder's output
    (umbra/model/private_path.py), which these states leave out."""
    if getattr(model, "private_path", None) is not None:
        raise ConfigError("adapters are not trained over a private local path yet (its decoder reads more than "
                          "the middle's output): use a bundle without one")
    session = await middle.open_session(training=True)
    n = 0 if prompt is None else prompt.shape[0]
    out, device = [], device_of(model.encoder)
    try:
        for i in range(0, len(ids), batch_size):
            x = ids[i : i + batch_size].to(device)
            pos = torch.arange(n + x.shape[1], device=device).expand(x.shape[0], -1)
            with torch.no_grad():
                e = model.encoder.embed(x)
                if prompt is not None:
                    e = torch.cat([prompt.to(e.dtype).expand(x.shape[0], -1, -1), e], 1)
                hidden = model.encoder(None, pos, embeds=e)
            out.append(await middle.forward(hidden, pos, session))
    finally:
        await middle.close(session)
    return torch.cat(out)


@contextmanager
def frozen(module: torch.nn.Module):
    """The module's parameters without gradient for the duration (restored after)."""
    flags = [(p, p.requires_grad) for p in module.parameters()]
    for p, _ in flags:
        p.requires_grad_(False)
    try:
        yield module
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)


def lm_loss(logits: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy of logits [B,T,V] against ids [B,T] where mask[:, 1:] is True."""
    nll = F.cross_entropy(logits[:, :-1].float().transpose(1, 2), ids[:, 1:], reduction="none")  # [B,T-1]
    m = mask[:, 1:] & mask[:, :-1]
    return (nll * m).sum() / m.sum().clamp(min=1)


def train_lora(model, hidden: torch.Tensor, blocks: ViewBlocks, config: AdapterTrainConfig,
               name: str, beside: tuple[Adapter, ...] = (),
               start: LoraAdapter | None = None) -> tuple[LoraAdapter, list[float], list[float]]:
    """A fresh decoder LoRA trained on cached middle outputs hidden [N,n+T,C] of `blocks` (n: a
    frozen soft prompt's positions, not trained on), `beside` frozen decoder adapters that stay as
    they are (NOESIS stage 2: the shared parameters in place): (adapter, loss per step, mean loss
    per epoch). `start`: a LoRA of config's shape to continue from (a federation round starts from
    the global secure adapter; it is copied, never changed) instead of a fresh one."""
    config.validate()
    shape = model.plan.shape(model.spec.num_layers)
    device = hidden.device  # the model's
    adapter = build_adapter(name, config.lora(), model.spec, shape, device=device)
    if start is not None:
        try:
            adapter.load_state_dict(start.state_dict(), strict=True)
        except RuntimeError as exc:
            raise ConfigError(f"the starting adapter {start.name!r} does not match the training config's "
                              f"LoRA (rank, targets, blocks): {' '.join(str(exc).split())[:300]}") from None
    adapter.requires_grad_(True)
    params = list(adapter.parameters())
    opt = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    gen = torch.Generator().manual_seed(config.seed)  # the order is drawn on the CPU whatever the device
    ids, mask = blocks.ids.to(device), blocks.mask.to(device)
    n, t = ids.shape
    lead = hidden.shape[1] - t  # soft prompt positions
    pos = torch.arange(lead + t, device=device)
    others = [a for a in beside if a.kind is not Kind.SOFT_PROMPT]
    losses, epoch_losses = [], []
    with frozen(model.decoder):
        for _ in range(config.epochs):
            order = torch.randperm(n, generator=gen, device="cpu").to(device)
            start = len(losses)
            for i in range(0, n, config.batch_size):
                b = order[i : i + config.batch_size]
                aset = AdapterSet([adapter, *others], frozen=False)  # a training set serves one forward
                logits = model.decoder(hidden[b], pos.expand(len(b), -1), adapters=aset)[:, lead:]
                loss = lm_loss(logits, ids[b], mask[b])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params, config.grad_clip)
                opt.step()
                losses.append(float(loss.detach()))
            epoch_losses.append(float(np.mean(losses[start:])))
    adapter.requires_grad_(False)
    adapter.touch()
    return adapter, losses, epoch_losses


async def train_view_adapter(model, middle: Middle, texts: list[str], config: AdapterTrainConfig,
                             name: str, beside: tuple[Adapter, ...] = ()) -> tuple[LoraAdapter, AdapterReport]:
    """One adapter on one view: pack, run the trunk once, train the decoder LoRA (beside the
    frozen adapters `beside` it: a soft prompt among them goes into the trunk)."""
    config.validate()
    blocks = pack_view(model.tokenizer, list(texts), config.block_len, config.fim_rate, config.seed)
    prompts = [a.prompt.detach() for a in beside if a.kind is Kind.SOFT_PROMPT]
    prompt = torch.cat(prompts) if prompts else None
    t0 = time.perf_counter()
    hidden = await trunk_states(model, middle, blocks.ids, config.batch_size, prompt)
    t1 = time.perf_counter()
    adapter, losses, epoch_losses = train_lora(model, hidden, blocks, config, name, beside)
    t2 = time.perf_counter()
    report = AdapterReport(name, blocks.texts, blocks.tokens, len(blocks.ids), len(losses), config.epochs,
                           tuple(losses), tuple(epoch_losses), t1 - t0, t2 - t1)
    return adapter, report


async def train_dual(model, middle: Middle, raw_texts: list[str], scrubbed_texts: list[str],
                     config: DualAdapterConfig = DualAdapterConfig()) -> tuple[LoraAdapter, LoraAdapter, DualReport]:
    """(secure adapter on the scrubbed view, revealing adapter on the raw view, report)."""
    if config.secure_name == config.revealing_name:
        raise ConfigError("the secure and the revealing adapter need different names")
    t0 = time.perf_counter()
    secure, secure_report = await train_view_adapter(model, middle, scrubbed_texts, config.secure, config.secure_name)
    revealing, revealing_report = await train_view_adapter(model, middle, raw_texts, config.revealing,
                                                           config.revealing_name)
    return secure, revealing, DualReport(secure_report, revealing_report, time.perf_counter() - t0)
