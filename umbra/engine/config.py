"""Typed configuration of the completion engine, with the defaults every caller starts from.

A session holds one `EngineConfig`; each request may pass its own (use `dataclasses.replace`
to change one field). `validate()` raises ConfigError on values that make no sense."""

from __future__ import annotations

from dataclasses import dataclass, field

from umbra.errors import ConfigError


@dataclass(frozen=True)
class PromptConfig:
    budget: int = 1024  # tokens of file context (prefix + suffix) in the FIM prompt
    prefix_share: float = 0.75  # share of the budget reserved for the prefix; unused parts move over
    # When the prefix must be cut, cut this much deeper than needed (fraction of the prefix
    # budget) so the next keystrokes keep the same cut and their prompts still share a prefix.
    cut_slack: float = 0.125
    # "auto": SPM where the model was trained on it (prefix last, so typing reuses the cache),
    # else PSM; "psm" / "spm" force an order (see fim.py).
    order: str = "auto"
    # Token healing: drop the prompt's last prefix token and make the first generated token
    # start with its text, so a cursor after "return " or "ret" completes the way the model
    # tokenizes such text (" a", "return") instead of from an odd token boundary.
    token_healing: bool = True

    def validate(self) -> None:
        if self.order not in ("auto", "psm", "spm"):
            raise ConfigError(f"prompt order must be auto, psm or spm, got {self.order!r}")
        if self.budget < 1:
            raise ConfigError(f"prompt budget must be >= 1 token, got {self.budget}")
        if not 0.0 <= self.prefix_share <= 1.0:
            raise ConfigError(f"prefix_share must lie in [0, 1], got {self.prefix_share}")
        if not 0.0 <= self.cut_slack < 1.0:
            raise ConfigError(f"cut_slack must lie in [0, 1), got {self.cut_slack}")


MIN_TEMPERATURE, MAX_TEMPERATURE = 1e-4, 100.0


@dataclass(frozen=True)
class SamplingConfig:
    temperature: float = 0.0  # 0 = greedy (argmax)
    top_p: float = 1.0  # nucleus sampling mass; 1 = the full distribution
    seed: int | None = 0  # seed of the per-request generator; None = fresh entropy each request

    def validate(self) -> None:
        # Bounded both ways: logits / temperature must stay finite in float32 (1e39 is inf there).
        if not (self.temperature == 0 or MIN_TEMPERATURE <= self.temperature <= MAX_TEMPERATURE):
            raise ConfigError(f"temperature must be 0 (greedy) or between {MIN_TEMPERATURE} and {MAX_TEMPERATURE:g}, "
                              f"got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"top_p must lie in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


LINE_MODES = (False, True, "auto")


@dataclass(frozen=True)
class StopConfig:
    max_tokens: int = 64  # hard cap on generated tokens
    # False: stop at the end of the current line; True: the block at the cursor; "auto": the
    # rest of the line mid-line, the block (ending at a dedent or a blank line) at a blank line.
    multiline: bool | str = False
    # Multi-line only: stop where a line dedents out of the cursor's block (see stops.py).
    stop_at_block_end: bool = True
    # Stop sequences (OpenAI's `stop`): the completion ends before the first one it contains.
    strings: tuple[str, ...] = ()
    # Stop a degenerate loop: once the last `repetition` generated tokens (or more) are one unit
    # of at most a third as many tokens repeated, the completion keeps one copy of the unit
    # (repetition.py). 0 = off (never for streaming: a cut could take back streamed text).
    repetition: int = 0
    # A request's deadline (session.py: an editor's latency budget) is a target: past it, decoding
    # stops at the first token after which the text, cut short, shows a whole word or line
    # (completion_text.CompletionText.shows_if_cut), and at the latest this many seconds after it,
    # whatever the text holds. 0 = stop at the deadline.
    deadline_grace: float = 0.0

    def validate(self) -> None:
        if not self.deadline_grace >= 0:
            raise ConfigError(f"deadline_grace must be >= 0 seconds, got {self.deadline_grace}")
        if self.max_tokens < 1:
            raise ConfigError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if not any(self.multiline is mode or self.multiline == mode and type(mode) is str for mode in LINE_MODES):
            raise ConfigError(f"multiline must be true, false or \"auto\", got {self.multiline!r}")
        if self.repetition != 0 and self.repetition < 3:
            raise ConfigError(f"repetition must be 0 (off) or >= 3 tokens, got {self.repetition}")
        if not all(isinstance(s, str) and s for s in self.strings):
            raise ConfigError("stop strings must be non-empty strings")


SPECULATION_MODES = ("off", "on", "auto")


@dataclass(frozen=True)
class SpeculationConfig:
    """Speculative split decoding (speculative.py): greedy output is the same, sampled output has
    the same distribution (the speculative-sampling rule)."""

    # "off": one cloud round trip per token; "on": speculate on every request; "auto":
    # speculate once a decode trip is measured to cost at least `min_trip_ms` (a slow link), bundle or
    # not (under a client bundle with a fixed k: no ladder, invariant 7), never with an in-process
    # middle (no trips to save)
    mode: str = "auto"
    # drafted positions per verify frame (the ladder's first rung); a frame carries k + 1 positions
    # (the first one: the prompt's new ids + k), whatever the acceptance of its drafts
    k: int = 12
    # the ladder's top (None: 2k): a frame whose drafts were all accepted is followed by one of
    # twice as many, up to k_max; any rejection goes back to k. The rung is a function of the
    # trims the cloud already saw, so frame sizes say nothing more (docs/privacy/speculation.md).
    # k_max = k: a fixed k (always so under a client bundle).
    k_max: int | None = None
    lookup: bool = True  # draft from the prompt's own tokens (the latest earlier match of the last n-gram)
    ngram: int = 3  # longest n-gram prompt lookup matches (it tries ngram .. min_ngram)
    min_ngram: int = 2  # shortest one
    draft_model: bool = True  # draft the rest with the client's own blocks, the middle skipped
    min_trip_ms: float = 12.0  # auto: the measured decode trip from which speculation pays
    # the draft model drafts position j only while its measured acceptance p has p**j >= this
    # (at least one position): client compute, never frame size (the frame is padded to k drafts
    # all the same), so a low bar: with the draft order by expected tokens, 0.2 cost a tuned bundle
    # 10.5 round trips for 32 tokens, 0.01 9.0 (replay of 48 cursors, docs/benchmarks.md)
    min_acceptance: float = 0.01

    def validate(self) -> None:
        if self.mode not in SPECULATION_MODES:
            raise ConfigError(f"speculation mode must be one of {', '.join(SPECULATION_MODES)}, got {self.mode!r}")
        if not 1 <= self.k <= 16:
            raise ConfigError(f"speculation k must lie in [1, 16], got {self.k}")
        if self.k_max is not None and not self.k <= self.k_max <= 32:
            raise ConfigError(f"speculation k_max must lie in [k, 32], got {self.k_max} with k = {self.k}")
        if not 1 <= self.min_ngram <= self.ngram:
            raise ConfigError(f"need 1 <= min_ngram <= ngram, got {self.min_ngram} and {self.ngram}")
        if self.min_trip_ms < 0:
            raise ConfigError(f"min_trip_ms must be >= 0, got {self.min_trip_ms}")
        if not 0 < self.min_acceptance < 1:
            raise ConfigError(f"min_acceptance must lie in (0, 1), got {self.min_acceptance}")

    @property
    def rungs(self) -> tuple[int, ...]:
        """The ladder of drafts per frame: k, 2k, 4k, ... up to k_max."""
        top, out = self.k_max if self.k_max is not None else 2 * self.k, [self.k]
        while out[-1] * 2 <= top:
            out.append(out[-1] * 2)
        return tuple(out)


@dataclass(frozen=True)
class EngineConfig:
    prompt: PromptConfig = field(default_factory=PromptConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    stop: StopConfig = field(default_factory=StopConfig)
    prefill_chunk: int = 256  # prompt tokens per forward; cancellation is checked between chunks
    speculation: SpeculationConfig = field(default_factory=SpeculationConfig)

    def validate(self) -> "EngineConfig":
        self.prompt.validate()
        self.sampling.validate()
        self.stop.validate()
        self.speculation.validate()
        if self.prefill_chunk < 1:
            raise ConfigError(f"prefill_chunk must be >= 1, got {self.prefill_chunk}")
        return self
