"""CompletionEngine: a loaded client model plus a way to make runners; hands out sessions.

    model  = ClientModel.load(model_dir, plan)                 # tokenizer, FIM format, client parts
    engine = CompletionEngine.split(model, middle)              # any Middle: LocalMiddle, RemoteMiddle
    engine = CompletionEngine.monolithic(model)                 # the in-process baseline
    async with engine.session() as session:                     # one per editor buffer
        result = await session.complete(prefix, suffix, adapters=engine.route("python")[1])
        result.text, result.recomputed_tokens, result.expert, ...

`route(language)` picks the request's adapters (the model's shared ones, the language's expert;
routing.py) as a frozen AdapterSet; `complete(..., language=)` does it for a throw-away session.

The engine never owns the Middle: whoever created it closes it (`await middle.aclose()`)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import asynccontextmanager
from dataclasses import replace

from umbra.engine.config import EngineConfig
from umbra.engine.model import ClientModel
from umbra.engine.routing import Route
from umbra.engine.runner import MonolithicRunner, Runner, SplitRunner
from umbra.engine.sampling import allowed_mask
from umbra.engine.session import CancelToken, CompletionResult, CompletionSession
from umbra.engine.draft import DraftModel
from umbra.engine.speculative import DraftStats, LinkClock, Speculator
from umbra.errors import ConfigError
from umbra.middle.protocol import Middle
from umbra.model.adapters.selection import AdapterSet


class CompletionEngine:
    def __init__(self, model: ClientModel, new_runner: Callable[[], Runner], mode: str,
                 config: EngineConfig | None = None, context_length: int | None = None):
        self.model = model
        # prompt + completion must fit here: the model's positions, or less if the middle says so
        self.context_length = min(model.spec.max_position_embeddings,
                                  context_length or model.spec.max_position_embeddings)
        self.new_runner = new_runner
        self.mode = mode  # "split" | "monolithic" | "client-only" (client_only.py: no middle at all)
        self.config = (config or EngineConfig()).validate()
        self.allowed = allowed_mask(model.spec.vocab_size, model.tokenizer, model.fim)
        self.link = LinkClock()  # measured decode-trip latency, shared by the sessions (speculation)
        self.drafting = DraftStats()  # what each draft source yielded, shared by the sessions

    @classmethod
    def split(cls, model: ClientModel, middle: Middle, config: EngineConfig | None = None,
              context_length: int | None = None) -> "CompletionEngine":
        """Client encoder/decoder around `middle`, which must run the same plan's blocks.
        `context_length`: the middle's longest session, if smaller than the model's."""
        if middle.hidden_size != model.spec.hidden_size:
            raise ConfigError(
                f"the middle works on hidden size {middle.hidden_size}, the model on {model.spec.hidden_size}"
            )
        return cls(model, lambda: SplitRunner(model.encoder, model.decoder, middle, model.private_path), "split", config,
                   context_length)

    @classmethod
    def monolithic(cls, model: ClientModel, config: EngineConfig | None = None) -> "CompletionEngine":
        """Encoder, middle blocks and decoder in one process with no seam."""
        middle = model.load_middle()
        return cls(model, lambda: MonolithicRunner(model.encoder, middle, model.decoder, model.private_path), "monolithic", config)

    def new_session(self, config: EngineConfig | None = None) -> CompletionSession:
        m = self.model
        # client-only: the draft model is the model itself, and there is no trip to save
        speculator = (None if self.mode == "client-only"
                      else Speculator(DraftModel(m.encoder, m.decoder, self.allowed, private_path=m.private_path),
                                     self.link, self.drafting))
        return CompletionSession(self.new_runner(), m.tokenizer, m.fim, self.allowed, config or self.config,
                                 self.context_length, speculator)

    @asynccontextmanager
    async def session(self, config: EngineConfig | None = None):
        """`async with engine.session() as s:` — closes the session (and its middle session)."""
        session = self.new_session(config)
        try:
            yield session
        finally:
            await session.close()

    def route(self, language: str | None) -> tuple[Route, AdapterSet]:
        """The adapters serving a request in `language`: the shared ones, the language's expert, and
        the revealing adapter this user's access keys unlock (the gating pass, on the client alone)
        or else the secure adapter."""
        route = self.model.router.route(language, self.model.unlock())
        return route, self.model.adapter_set(route.adapters)

    async def complete(self, prefix: str, suffix: str = "", config: EngineConfig | None = None,
                       cancel: CancelToken | None = None, language: str | None = None) -> CompletionResult:
        """One completion in a throw-away session, with the adapters of `language`."""
        route, adapters = self.route(language)
        async with self.session(config) as session:
            result = await session.complete(prefix, suffix, cancel=cancel, adapters=adapters)
        return with_route(result, route)


def with_route(result: CompletionResult, route: Route) -> CompletionResult:
    """The result, naming the language, the expert and the access state ("secure" or "revealing:
    NAME") that served it."""
    return replace(result, language=route.language, expert=route.expert, access=route.access)
