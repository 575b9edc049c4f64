"""Fill-in-the-middle line exact match: hide one whole non-blank line of a held-out file,
complete it from the prefix and suffix around it, compare after stripping whitespace."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from umbra.data.corpus import Document
from umbra.engine import CompletionEngine, EngineConfig


@dataclass(frozen=True)
class FimCase:
    path: str
    line: int  # 0-based index of the hidden line
    prefix: str  # text before the line (ends with a newline or is empty)
    suffix: str  # text after the line's newline
    truth: str  # the hidden line without its newline


@dataclass
class FimLineResult:
    cases: int = 0
    exact: int = 0
    examples: list[tuple[str, str]] = field(default_factory=list)  # (truth, completion), first few

    @property
    def exact_match(self) -> float:
        return self.exact / self.cases if self.cases else float("nan")


def sample_cases(docs: list[Document], n: int, seed: int) -> list[FimCase]:
    """n non-blank lines drawn uniformly without replacement over all lines of `docs`."""
    candidates = []
    for di, doc in enumerate(sorted(docs, key=lambda d: d.path)):
        lines = doc.text.splitlines(keepends=True)
        candidates.extend((di, li) for li, line in enumerate(lines) if line.strip())
    if not candidates:
        return []
    rng = np.random.default_rng(seed)
    picks = rng.choice(len(candidates), size=min(n, len(candidates)), replace=False)
    ordered = sorted(docs, key=lambda d: d.path)
    cases = []
    for k in sorted(int(p) for p in picks):
        di, li = candidates[k]
        lines = ordered[di].text.splitlines(keepends=True)
        cases.append(FimCase(ordered[di].path, li, "".join(lines[:li]), "".join(lines[li + 1 :]),
                             lines[li].rstrip("\r\n")))
    return cases


async def fim_line_exact_match(engine: CompletionEngine, cases: list[FimCase], max_tokens: int = 48,
                               keep_examples: int = 5) -> FimLineResult:
    """Greedy single-line completion of each case; a fresh session per case."""
    base = EngineConfig()
    config = EngineConfig(prompt=base.prompt, sampling=base.sampling,
                          stop=type(base.stop)(max_tokens=max_tokens, multiline=False))
    result = FimLineResult()
    for case in cases:
        completion = await engine.complete(case.prefix, "\n" + case.suffix, config)
        result.cases += 1
        got = completion.text.split("\n", 1)[0]
        if got.strip() == case.truth.strip():
            result.exact += 1
        if len(result.examples) < keep_examples:
            result.examples.append((case.truth, got))
    return result
