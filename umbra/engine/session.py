"""CompletionSession: consecutive completions of one editor buffer, with prefix reuse.

The session mirrors the token ids whose KV the runner holds. A request builds its FIM prompt,
finds the longest common prefix with those ids, truncates the runner (client caches and the
middle session) to it and runs only the rest — typing one character re-runs the prompt from
the edit point, not the whole file. `CompletionResult.recomputed_tokens` reports how many
prompt tokens were run.

At the cursor the engine continues the buffer exactly: the prompt ends on a boundary the
model's tokenizer would make and the model re-creates the cursor's unfinished text first (token
healing, healing.py), so a completion never repeats the blanks or the partial word before the
cursor; the buffer is read as LF and the completion written back in its line ends and
indentation unit (file_style.py).

Each request names its adapters (`adapters=`, an AdapterSet; none = the plain model). The runner
keeps the caches valid for that set (see runner.py), and a soft prompt's positions come out of
the context budget.

A request may carry a deadline (`deadline=`, a `time.monotonic()` instant, e.g. an editor
request's arrival plus its latency budget): past it, decoding stops at the first step whose text,
cut short, shows a whole line or word, or once `StopConfig.deadline_grace` has passed too, and the
completion is the text so far, trimmed to its last whole line or word (stop reason "deadline";
decoding.py, completion_text.py). The prompt always runs in full, so its caches serve the next request.
`StopConfig.repetition` stops a degenerate loop (repetition.py; stop reason "repetition").

A request may carry context from open files (`context=`, a RepoContext of engine/context.py):
its tokens head the prompt in the repository layout (`<file_sep>` files, when the tokenizer has
a file separator) or as comments before the prefix (when not), within the context's token budget
and at most half the prompt's room; the file's budget shrinks by as much. The same context gives
the same ids (memoised), so across keystrokes it stays in the reused prefix of the caches.
Neither is for streaming callers: both can take back text a stream would have sent.

Decoding runs step by step (decoding.py: one cloud round trip per token) or, for a greedy
request on a slow link, speculatively (speculative.py: k drafted tokens verified in one round
trip, the same tokens). `CompletionResult.round_trips` counts the request's trips to the cloud.

Requests are serialised per session. Between prefill chunks and decode steps the session
yields to the event loop and checks its CancelToken: asyncio cancellation (task.cancel()) and
`CancelToken.cancel()` both stop the request there (the latter raises umbra.errors.Cancelled);
the caches stay consistent for the next request either way."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from umbra.engine.config import EngineConfig, PromptConfig
from umbra.engine.context import RepoContext, render_comments
from umbra.engine.decoding import Continuation, decode_plain
from umbra.engine.file_style import FileStyle
from umbra.engine.fim import FimFormat, build_prompt
from umbra.engine.completion_text import TextStream
from umbra.engine.runner import Runner, common_prefix
from umbra.engine.speculative import SpeculationCounts, Speculator
from umbra.engine.tokenizer import ClientTokenizer
from umbra.errors import Cancelled, CloudUnavailable, ConfigError, SessionError
from umbra.model.adapters.selection import EMPTY, AdapterSet

_CONTROL_TOKENS = 4  # BOS + the three FIM markers, outside the context budget
FILE_SEPARATORS = ("<file_sep>", "<|file_sep|>")  # repository-layout file separators (context.py)


class CancelToken:
    """Explicit cancellation for callers that do not cancel the asyncio task itself."""

    def __init__(self) -> None:
        self._cancelled = False

    def cancel(self) -> None:
        self._cancelled = True

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def raise_if_cancelled(self) -> None:
        if self._cancelled:
            raise Cancelled("completion cancelled")


@dataclass(frozen=True)
class CompletionResult:
    text: str  # what the editor inserts at the cursor (the buffer's line ends and indentation unit)
    tokens: tuple[int, ...]  # generated ids (stop token excluded), before text stop rules
    # "eos" | "max_tokens" | "newline" | "block_end" | "blank_line" | "stop_string" | "repetition" | "deadline"
    stop_reason: str
    prompt_tokens: int  # length of the FIM prompt
    reused_tokens: int  # prompt tokens served from the session's caches
    recomputed_tokens: int  # prompt tokens run by this request (= prompt_tokens - reused_tokens)
    template: str  # FIM template name
    prefill_seconds: float  # running the recomputed prompt tokens
    decode_seconds: float  # sampling and running the generated tokens
    evicted: bool = False  # the cloud had dropped the session; the prompt was re-run in full
    adapters: tuple[str, ...] = ()  # names of the adapters that served the request
    language: str | None = None  # the request's canonical language, if given (routing.py)
    expert: str | None = None  # the expert adapter that served it (None: shared adapters only)
    access: str = "secure"  # SecureGate: "secure", or "revealing: NAME" when an access key unlocked NAME
    round_trips: int = 0  # trips to the cloud for this request (0 in process; see Middle.round_trips)
    speculation: SpeculationCounts | None = None  # drafts and frames, when the request speculated
    context_files: tuple[str, ...] = ()  # open files whose snippets were in the prompt (names only)

    @property
    def generated_tokens(self) -> int:
        return len(self.tokens)


class CompletionSession:
    def __init__(self, runner: Runner, tokenizer: ClientTokenizer, fim: FimFormat,
                 allowed: torch.Tensor, config: EngineConfig, context_length: int,
                 speculator: Speculator | None = None):
        self.runner = runner
        self.speculator = speculator  # None: always step by step
        self.context_length = context_length  # most positions the model (and the middle) accept
        self.tokenizer = tokenizer
        self.fim = fim
        self.allowed = allowed  # bool [V]: ids the model may emit
        self.config = config.validate()
        self._cached: list[int] = []  # ids whose KV the runner holds, in order
        self._cut_hint: int | None = None  # previous prompt's prefix cut (see fim.py)
        self._file_sep = next((i for i in map(tokenizer.token_id, FILE_SEPARATORS) if i is not None), None)
        self._context_memo: tuple | None = None  # (context, room) -> (head, lead, files)
        self._lock = asyncio.Lock()
        self.closed = False

    @property
    def cached_tokens(self) -> int:
        return len(self._cached)

    async def complete(self, prefix: str, suffix: str = "", config: EngineConfig | None = None,
                       cancel: CancelToken | None = None, adapters: AdapterSet | None = None,
                       on_text: Callable[[str], None] | None = None,
                       deadline: float | None = None, context: RepoContext | None = None) -> CompletionResult:
        """Complete at the cursor between `prefix` and `suffix` with `adapters` (None: none).
        `on_text(delta)`, when given, streams the completion: it is called once per decode step
        that does not end it, with the text that step settled ("" if none), and once at the end
        with the rest; the deltas concatenate to `result.text` (completion_text.py).
        `deadline`: a `time.monotonic()` instant after which decoding stops (see the module).
        `context`: snippets of other open files for the prompt (see the module)."""
        cfg = (config or self.config).validate()
        if on_text is not None and (deadline is not None or cfg.stop.repetition):
            raise ConfigError("a streamed completion takes no deadline and no repetition stop")
        cancel = cancel or CancelToken()
        adapters = adapters if adapters is not None else EMPTY
        style = FileStyle.of(prefix, suffix)  # the model reads LF and writes its own indentation
        prefix, suffix = style.read(prefix), style.read(suffix)
        stream = TextStream(style.stream(on_text)) if on_text is not None else None
        async with self._lock:
            if self.closed:
                raise SessionError("completion session is closed")
            cancel.raise_if_cancelled()
            pcfg = self._prompt_config(cfg, adapters.prompt_length)
            head, lead, files = self._context_ids(context, pcfg.budget)
            if head or lead:
                pcfg = replace(pcfg, budget=pcfg.budget - len(head) - len(lead))
            prompt = build_prompt(self.tokenizer, self.fim, prefix, suffix, pcfg, self._cut_hint, head, lead)
            self._cut_hint = prompt.prefix_cut
            trips = self.runner.round_trips
            try:
                await self.runner.use(adapters)
                result = await self._generate(prompt.ids, prompt.heal, prefix, suffix, cfg, cancel, stream, deadline,
                                              adapters)
            except SessionError:  # evicted or lost by the cloud: start over once, in full
                await self.runner.reset()
                self._cached = []
                await self.runner.use(adapters)  # `use` itself may have been what found the session gone
                result = _replace_evicted(await self._generate(prompt.ids, prompt.heal, prefix, suffix, cfg, cancel,
                                                               stream, deadline, adapters))
            return replace(result, text=style.render(result.text), adapters=adapters.names,
                           round_trips=self.runner.round_trips - trips, context_files=files)

    async def close(self) -> None:
        async with self._lock:
            if not self.closed:
                self.closed = True
                self._cached = []
                try:
                    await self.runner.close()
                except (CloudUnavailable, SessionError):  # dead cloud / dropped session: nothing held
                    pass

    # -------------------------------------------------------------------------------------
    def _prompt_config(self, cfg: EngineConfig, soft_prompt: int = 0) -> PromptConfig:
        """The prompt budget, shrunk so soft prompt + prompt + completion fit the context window."""
        limit = self.context_length - cfg.stop.max_tokens - _CONTROL_TOKENS - soft_prompt
        if limit < 1:
            raise ConfigError(f"max_tokens {cfg.stop.max_tokens} leaves no room for a prompt in the "
                              f"model's context of {self.context_length} positions"
                              + (f" after the {soft_prompt}-vector soft prompt" if soft_prompt else ""))
        return cfg.prompt if cfg.prompt.budget <= limit else replace(cfg.prompt, budget=limit)

    def _context_ids(self, context: RepoContext | None, room: int
                     ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[str, ...]]:
        """(head, lead, files): the context's ids before the FIM markers (repository layout) or
        before the prefix (comment layout), at most min(context.tokens, room // 2) of them (the
        least relevant snippets dropped first, the most relevant one cut to its top lines when it alone
        is too long), and the paths of the files they hold."""
        if context is None or not context.snippets:
            return (), (), ()
        if self._context_memo is not None and self._context_memo[0] == (context, room):
            return self._context_memo[1]
        enc, sep = self.tokenizer.encode, self._file_sep
        if sep is not None:
            parts = [[sep, *enc(s.path + "\n"), *enc(s.text)] for s in context.snippets]
            tail = [sep, *enc(context.path + "\n")]
        else:
            parts = [enc(render_comments(s, context.language)) for s in context.snippets]
            tail = []
        allowed, first = min(context.tokens, room // 2), 0
        while first < len(parts) and sum(map(len, parts[first:])) + len(tail) > allowed:
            first += 1
        if first == len(parts):  # the most relevant snippet alone is too long: its top lines
            first -= 1
            last = context.snippets[first]
            lines = last.text.splitlines(keepends=True)
            while lines and len(parts[first]) + len(tail) > allowed:
                lines.pop()
                cut = type(last)(last.path, "".join(lines))
                parts[first] = ([sep, *enc(cut.path + "\n"), *enc(cut.text)] if sep is not None
                                else enc(render_comments(cut, context.language)))
            if not lines:
                return (), (), ()
        ids = tuple(t for part in parts[first:] for t in part) + tuple(tail)
        files = tuple(s.path for s in context.snippets[first:])
        out = (ids, (), files) if sep is not None else ((), ids, files)
        self._context_memo = ((context, room), out)
        return out

    async def _run(self, ids: list[int], last: int = 0) -> torch.Tensor:
        """Feed ids; the last position's logits [V], or the last `last` positions' [last, V]."""
        logits = await self.runner.run(ids, last=last) if last else await self.runner.run(ids)
        self._cached.extend(ids)
        return logits

    async def _drop(self, n: int) -> None:
        """Forget the last n cached positions (rejected drafts), in every cache."""
        await self.runner.truncate(len(self._cached) - n)
        del self._cached[len(self._cached) - n :]

    def _room(self) -> int:
        """Positions left in the context window."""
        return self.context_length - self.runner.prompt_length - len(self._cached)

    async def _generate(self, ids: list[int], heal: str, prefix: str, suffix: str, cfg: EngineConfig,
                        cancel: CancelToken, stream: TextStream | None = None,
                        deadline: float | None = None, adapters: AdapterSet = EMPTY) -> CompletionResult:
        """Run the prompt, then decode. With token healing, the prompt lacks the prefix's last
        tokens (text `heal`): the first chosen tokens re-create `heal`, and the completion is
        the generated text after it."""
        t0 = time.perf_counter()
        self._cached = self._cached[: self.runner.length]  # after a failed step
        common = common_prefix(self._cached, ids)
        common = min(common, len(ids) - 1)  # run at least one token to get next-token logits
        await self.runner.truncate(common)
        del self._cached[common:]
        spec = self.speculator
        speculate = spec is not None and spec.wanted(cfg.speculation, cfg.sampling.greedy,
                                                     private=self.tokenizer.private, remote=self.runner.round_trips > 0)
        # speculating, the prompt's new ids head the first verify frame: the edit's prefill and the
        # first drafts cost one trip (the middle splits a frame only at the cloud's size limit)
        starts = [common] if speculate else list(range(common, len(ids), cfg.prefill_chunk))
        logits = None
        for start in starts[:-1] if speculate else starts:
            await _checkpoint(cancel)
            logits = await self._run(ids[start : start + cfg.prefill_chunk])
        t1 = time.perf_counter()

        cont = Continuation(self.tokenizer, self.fim.stop_ids, self.allowed, heal, prefix, suffix, cfg, stream,
                            deadline)
        checkpoint = lambda: _checkpoint(cancel)  # noqa: E731
        counts = None
        if speculate:
            counts = SpeculationCounts()
            reason = await spec.decode(cfg.speculation, cont, ids[starts[-1]:], ids, adapters, self._run, self._drop,
                                       self._room, checkpoint, counts, private=self.tokenizer.private)
        else:
            clock = spec.clock if spec is not None else None
            reason = await decode_plain(cont, logits, self._timed_run(clock), checkpoint)
        text = cont.end(reason)
        t2 = time.perf_counter()
        return CompletionResult(
            text=text,
            tokens=tuple(cont.generated),
            stop_reason=reason,
            prompt_tokens=len(ids),
            reused_tokens=common,
            recomputed_tokens=len(ids) - common,
            template=self.fim.name,
            prefill_seconds=t1 - t0,
            decode_seconds=t2 - t1,
            speculation=counts,
        )

    def _timed_run(self, clock):
        """`_run` of one decode step, its latency observed by the link clock (if any)."""
        if clock is None:
            return self._run

        async def run(step: list[int]) -> torch.Tensor:
            t0 = time.perf_counter()
            logits = await self._run(step)
            clock.observe(time.perf_counter() - t0)
            return logits

        return run


async def _checkpoint(cancel: CancelToken) -> None:
    """A cancellation point: yield to the event loop, then honour the explicit token."""
    await asyncio.sleep(0)
    cancel.raise_if_cancelled()


def _replace_evicted(result: CompletionResult) -> CompletionResult:
    return replace(result, evicted=True)
