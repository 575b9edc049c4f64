"""SessionPool over real completion sessions (the monolithic engine of a tiny model, in-process):
prefix reuse per key, a newer request cancels the older, LRU eviction, close."""

from __future__ import annotations

import asyncio

import pytest

from lsp.sessions import SessionPool
from umbra.engine import ClientModel, CompletionEngine, EngineConfig, StopConfig

PREFIX, SUFFIX = "def add(a, b):\n    total = a + b\n    return ", "\n\nprint(add(1, 2))\n"


@pytest.fixture(scope="module")
def engine(lsp_model_dir) -> CompletionEngine:
    return CompletionEngine.monolithic(ClientModel.load(lsp_model_dir), EngineConfig(stop=StopConfig(max_tokens=24)))


async def test_a_key_keeps_its_session_warm(engine):
    pool = SessionPool()
    first = await pool.run("a", engine.new_session, lambda s: s.complete(PREFIX, SUFFIX))
    second = await pool.run("a", engine.new_session, lambda s: s.complete(PREFIX + "t", SUFFIX))
    other = await pool.run("b", engine.new_session, lambda s: s.complete(PREFIX + "t", SUFFIX))
    assert first.reused_tokens == 0 and second.reused_tokens > second.prompt_tokens // 2
    assert other.reused_tokens == 0 and other.text == second.text
    await pool.close_all()
    assert len(pool) == 0


async def test_a_newer_request_cancels_the_older_and_the_session_stays_consistent(engine):
    pool = SessionPool()
    long = EngineConfig(stop=StopConfig(max_tokens=300, multiline=True))
    older = asyncio.ensure_future(pool.run("a", engine.new_session, lambda s: s.complete(PREFIX, SUFFIX, long)))
    await asyncio.sleep(0)  # the older request starts decoding
    newer = await pool.run("a", engine.new_session, lambda s: s.complete(PREFIX + "t", SUFFIX))
    with pytest.raises(asyncio.CancelledError):
        await older
    assert pool.superseded(older) is False  # forgotten once done (no task kept alive)
    assert newer.text == (await engine.complete(PREFIX + "t", SUFFIX)).text
    await pool.close_all()


async def test_superseded_is_known_while_the_older_task_unwinds(engine):
    pool = SessionPool()
    long = EngineConfig(stop=StopConfig(max_tokens=300, multiline=True))
    seen = []

    async def older_request(session):
        try:
            return await session.complete(PREFIX, SUFFIX, long)
        except asyncio.CancelledError:
            seen.append(pool.superseded(asyncio.current_task()))
            raise

    older = asyncio.ensure_future(pool.run("a", engine.new_session, older_request))
    await asyncio.sleep(0)
    await pool.run("a", engine.new_session, lambda s: s.complete(PREFIX, SUFFIX))
    with pytest.raises(asyncio.CancelledError):
        await older
    assert seen == [True]
    await pool.close_all()


async def test_least_recently_used_sessions_are_evicted_and_closed(engine):
    pool = SessionPool(max_sessions=2)
    sessions = {}
    for key in ("a", "b", "a", "c"):
        await pool.run(key, engine.new_session, lambda s, k=key: sessions.setdefault(k, s).complete(PREFIX, SUFFIX))
    assert "b" not in pool and "a" in pool and "c" in pool and len(pool) == 2
    await asyncio.sleep(0.05)  # the evicted session closes in the background
    assert sessions["b"].closed and not sessions["a"].closed
    assert await pool.close("a") is True and await pool.close("a") is False and sessions["a"].closed
    await pool.close_all()
    assert sessions["c"].closed
