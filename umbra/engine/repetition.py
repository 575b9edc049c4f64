"""Degenerate loops: a small model's completion that repeats one unit of tokens until the token
cap (`_error_error_error…`, `os.path.join(os.path.join(…`). Nothing after the first copy is worth
showing, and every further token costs a decode step, so the engine stops there
(`StopConfig.repetition`; the language server's inline completions turn it on).

    cut = loop_cut(generated_ids, min_tokens=12)   # None, or how many ids to keep

A loop is a run at the end of the ids, at least `min_tokens` long, in which every id equals the
one `period` ids before it, for a period of at most `min_tokens // 3` ids (so at least three
copies). The smallest such period is the unit; the completion keeps the ids up to the end of
its first copy in the run. Pure function, O(min_tokens² / 3) per call."""

from __future__ import annotations

from collections.abc import Sequence


def loop_cut(ids: Sequence[int], min_tokens: int) -> int | None:
    """The number of `ids` to keep if they end in a loop (see the module), else None."""
    n = len(ids)
    if min_tokens < 3 or n < min_tokens:
        return None
    for period in range(1, min_tokens // 3 + 1):
        j = n - 1
        while j - period >= 0 and ids[j] == ids[j - period]:
            j -= 1
        start = j - period + 1  # ids[start:] repeats with this period
        if n - start >= min_tokens:
            return start + period
    return None
