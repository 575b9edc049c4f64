"""What NOESIS stage 1 trains across languages: one family of shared parameters (seed 002 §3).

    soft_prompt  n vectors prepended at the input (seed 000's choice, n = 32)   crosses the wire
    deep_prompt  n gated prompt vectors per decoder block (LLaMA-Adapter)       client only
    lora         a common LoRA of rank r on the decoder blocks                  client only
    bottleneck   a Houlsby bottleneck adapter on the decoder blocks             client only
    full         the client's own blocks, final norm and head (not the INDVocab table: its ε-IND
                 guarantee covers the rows as drawn) — "full fine-tuning" of what the client holds;
                 the middle is the cloud's

A soft prompt is the only family that changes what the cloud receives, and it is the same for
every request whatever the language or the key (invariant 7). Each family is a set of named
parameters split by side: encoder-side ones need the gradient back through the middle."""

from __future__ import annotations


import torch
from torch import nn

from umbra.model.adapters.config import Kind, Placement
from umbra.model.adapters.modules import Adapter, build_adapter
from umbra.model.adapters.selection import AdapterSet
from umbra.model.device import device_of
from umbra.tuning.noesis_config import SharedConfig

class ClientHolder(nn.Module):
    """The client's parts and the trained adapter under one module, so `torch.func.functional_call`
    can substitute any of their parameters by name ("encoder.…", "decoder.…", "adapter.…")."""

    def __init__(self, encoder: nn.Module, decoder: nn.Module, adapter: Adapter | None):
        super().__init__()
        self.encoder, self.decoder = encoder, decoder
        self.adapter = adapter

    def forward(self, part: str, x: torch.Tensor, positions: torch.Tensor, frozen: tuple[Adapter, ...] = ()):
        """part "encoder": ids [B,T] -> states [B,n+T,C] (a trained soft prompt's n vectors first);
        part "decoder": middle output [B,n+T,C] -> logits [B,n+T,V], with the trained adapter and
        the `frozen` ones."""
        if part == "encoder":
            e = self.encoder.embed(x)
            if self.adapter is not None and self.adapter.kind is Kind.SOFT_PROMPT:
                e = torch.cat([self.adapter.prompt.expand(e.shape[0], -1, -1), e], 1)
            return self.encoder(None, positions, embeds=e)
        on_blocks = [a for a in (*frozen, self.adapter) if a is not None and a.kind is not Kind.SOFT_PROMPT]
        return self.decoder(x, positions, adapters=AdapterSet(on_blocks, frozen=False) if on_blocks else None)


class SharedParams:
    """The trained parameters of one family on a model (`ClientModel`-like: spec, plan, encoder,
    decoder). Adapter families build a fresh adapter; `full` trains the model's own modules."""

    def __init__(self, model, config: SharedConfig):
        self.config = config.validate()
        self.model = model
        adapter_config = config.adapter_config()
        shape = model.plan.shape(model.spec.num_layers)
        self.adapter: Adapter | None = (None if adapter_config is None else
                                        build_adapter(config.name, adapter_config, model.spec, shape,
                                                      device=device_of(model.encoder)))
        self.holder = ClientHolder(model.encoder, model.decoder, self.adapter)
        named = dict(self.holder.named_parameters())
        if self.adapter is not None:
            names = [n for n in named if n.startswith("adapter.")]
        else:
            names = [n for n in named if n.startswith(("encoder.stack.", "decoder."))]
        self.names = tuple(names)  # stable order: optimizer state and noise draws follow it
        self._named = named

    @property
    def family(self) -> str:
        return self.config.family

    @property
    def prompt_length(self) -> int:
        return self.adapter.length if self.config.family == "soft_prompt" else 0

    def parameters(self) -> dict[str, nn.Parameter]:
        return {n: self._named[n] for n in self.names}

    def encoder_side(self) -> tuple[str, ...]:
        """Names whose gradient needs the middle's backward (the soft prompt; the encoder blocks)."""
        return tuple(n for n in self.names if n.startswith(("encoder.", "adapter.prompt")))

    def decoder_side(self) -> tuple[str, ...]:
        enc = set(self.encoder_side())
        return tuple(n for n in self.names if n not in enc)

    def train(self) -> None:
        for p in self._named.values():
            p.requires_grad_(False)
        for n in self.names:
            self._named[n].requires_grad_(True)

    def freeze(self) -> None:
        """After training: the adapter read-only (its merge caches renewed); `full` leaves the model's flags."""
        if self.adapter is not None:
            self.adapter.requires_grad_(False)
            self.adapter.touch()

    @property
    def parameter_count(self) -> int:
        return sum(self._named[n].numel() for n in self.names)

    def placement(self) -> str:
        if self.adapter is None:
            return Placement.CLIENT.value
        return self.adapter.config.placement.value
