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


async def test_more_keys_busy_at_once_than_the_bound_cancels_none_and_the_pool_shrinks_back(engine):
    pool = SessionPool(max_sessions=16)
    started, release = [], asyncio.Event()

    async def held(session):  # every request stays inside its session until all 20 are in
        started.append(session)
        await release.wait()
        return await session.complete(PREFIX, SUFFIX)

    tasks = [asyncio.ensure_future(pool.run(f"doc{i}", engine.new_session, held)) for i in range(20)]
    while len(started) < 20:
        await asyncio.sleep(0.01)
    assert len(pool) == 20 and not any(t.done() for t in tasks)  # over the bound while all are busy
    release.set()
    results = await asyncio.gather(*tasks)  # none cancelled
    expected = (await engine.complete(PREFIX, SUFFIX)).text
    assert [r.text for r in results] == [expected] * 20
    assert len(pool) == 16  # the least recently used idle ones closed as requests ended
    await asyncio.sleep(0.05)
    assert sum(s.closed for s in started) == 4
    await pool.close_all()


async def test_fifty_requests_without_waiting_run_one_at_a_time_and_the_last_completes(engine):
    pool = SessionPool()
    long = EngineConfig(stop=StopConfig(max_tokens=300, multiline=True))
    inside, peak = [], [0]  # requests inside the key's session, measured by the requests themselves

    def request(i):
        async def fn(session):
            inside.append(i)
            peak[0] = max(peak[0], len(inside))
            try:
                return await session.complete(PREFIX + "t" * i, SUFFIX, long if i < 49 else None)
            finally:
                inside.remove(i)
        return fn

    tasks = []
    for i in range(50):
        tasks.append(asyncio.ensure_future(pool.run("a", engine.new_session, request(i))))
        if i % 7 == 0:
            await asyncio.sleep(0)  # some start decoding before the next arrives
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert peak[0] == 1 and not inside
    assert all(isinstance(r, asyncio.CancelledError) for r in results[:-1])
    assert results[-1].text == (await engine.complete(PREFIX + "t" * 49, SUFFIX)).text
    stats = pool.stats()
    assert stats.running == 0 and stats.max_per_key == 1 and 1 <= stats.started <= 50
    await pool.close_all()
