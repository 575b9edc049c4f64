"""Two cloud replicas (real `python -m server` processes, one shared token file) behind a real
nginx configured by deploy/nginx/render.py, all on loopback:

- new sessions spread over both replicas, and every request of a session (HTTP and the
  WebSocket upgrade) goes to one replica, by the hash of its X-Umbra-Session routing key;
- a replica SIGKILLed while a completion decodes costs each of its sessions exactly one
  transparent re-prefill on the survivor, the others none;
- every completion, before and after, equals the monolithic one on the same tiny model."""

from __future__ import annotations

import asyncio
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass

import httpx
import pytest

from cloud_helpers import auth, metric
from nginx_balancer import RENDER, nginx_balancer, nginx_binary, render_command
from server.launch import LocalCloud, local_cloud
from umbra.engine import ClientModel, CompletionEngine, EngineConfig, StopConfig
from umbra.engine.session import CompletionSession
from umbra.middle.remote import RemoteMiddle
from umbra.paths import repo_root

CONFIG = EngineConfig(stop=StopConfig(max_tokens=12, multiline=True, stop_at_block_end=False))
REPLICA = {"torch_threads": 1}
MAX_DOCUMENTS = 24  # P(a replica holds < 2 of 24 random keys) = 2 * 25 / 2**24
KILL_AT = 2  # the victim's stream messages in round 2 before the kill: it dies mid-decode


@pytest.fixture(scope="module")
def model(fim_qwen2_dir) -> ClientModel:
    return ClientModel.load(fim_qwen2_dir)


def _prompts(i: int) -> list[tuple[str, str]]:
    """Document i's requests: each types on at the cursor (prefix reuse)."""
    prefix = f"def scale_{i}(values, factor):\n    total = 0\n    for v in values:\n        total += v * "
    suffix = f"\n    return total\n\nprint(scale_{i}([1, 2, 3], {i}))\n"
    return [(prefix, suffix), (prefix + "factor\n    total = total ", suffix),
            (prefix + "factor\n    total = total + 1\n    if total > 10", suffix)]


@dataclass
class Document:
    """One editor buffer of one client: its own RemoteMiddle (own routing key and counters)."""

    index: int
    middle: RemoteMiddle
    session: CompletionSession
    reference: CompletionSession  # the monolithic engine's warm session
    replica: int | None = None  # which replica opened its cloud session

    async def complete(self, round_: int):
        prefix, suffix = _prompts(self.index)[round_]
        got = await self.session.complete(prefix, suffix)
        want = await self.reference.complete(prefix, suffix)
        assert (got.text, list(got.tokens)) == (want.text, list(want.tokens)), f"document {self.index}"
        return got


def _opened(cloud: LocalCloud) -> float:
    r = httpx.get(cloud.base_url + "/metrics", headers=auth(cloud.token), timeout=5)  # the replica itself
    assert r.status_code == 200, r.text
    return metric(r.text, "umbra_cloud_sessions_opened_total")


def _address(cloud: LocalCloud) -> str:
    return cloud.base_url.removeprefix("http://")


async def test_sessions_stick_spread_and_survive_a_replica_killed_mid_decode(model, fim_qwen2_dir, tmp_path):
    nginx_binary()  # fails naming the package when nginx is missing
    tokens = tmp_path / "tokens.json"  # one token file: each replica accepts every client's token
    async with local_cloud(fim_qwen2_dir, settings=REPLICA, token_file=tokens) as a, \
            local_cloud(fim_qwen2_dir, settings=REPLICA, token_file=tokens) as b:
        replicas = (a, b)
        with nginx_balancer([_address(a), _address(b)], tmp_path / "nginx") as lb:
            try:
                dead, docs = await _scenario(model, replicas, lb)
                _check_routing(lb, replicas, dead, docs)
            except BaseException:
                for r in replicas:
                    print(f"--- replica {r.base_url} log ---\n{r.log_path.read_text(errors='replace')[-4000:]}")
                print(lb.logs())
                raise


async def _scenario(model, replicas: tuple[LocalCloud, LocalCloud], lb) -> tuple[int, list[Document]]:
    mono = CompletionEngine.monolithic(model, CONFIG)
    docs: list[Document] = []
    try:
        # Round 1: documents one at a time until each replica holds at least two sessions.
        while min(sum(d.replica == r for d in docs) for r in (0, 1)) < 2:
            assert len(docs) < MAX_DOCUMENTS, "consistent hashing sent every session to one replica"
            before = [_opened(r) for r in replicas]
            token = replicas[len(docs) % 2].token  # either replica's token, on whichever replica
            middle = RemoteMiddle(lb.base_url, token, hidden_size=model.spec.hidden_size)
            doc = Document(len(docs), middle, CompletionEngine.split(model, middle, CONFIG).new_session(),
                           mono.new_session())
            docs.append(doc)
            assert (await doc.complete(0)).generated_tokens > 0
            grew = [_opened(r) - x for r, x in zip(replicas, before)]
            assert sorted(grew) == [0, 1], f"one cloud session opened on one replica, got {grew}"
            doc.replica = grew.index(1)

        # Round 2, all documents at once: the victim's replica dies while the victim decodes.
        dead = docs[0].replica
        survivor = replicas[1 - dead]
        opened_before = _opened(survivor)
        killed = []

        def kill_mid_decode(direction: str, _payload: bytes, m=docs[0].middle, start=docs[0].middle.stats.ws_messages):
            if direction == "sent" and not killed and m.stats.ws_messages - start == KILL_AT:
                replicas[dead].kill()  # SIGKILL, just before this decode step goes out
                killed.append(True)

        docs[0].middle.tap = kill_mid_decode
        victim, *_ = await asyncio.wait_for(asyncio.gather(*(d.complete(1) for d in docs)), timeout=120)
        assert killed and victim.generated_tokens > KILL_AT, "the victim did not reach its decode step"
        assert docs[0].middle.stats.reprefills == 1, "the victim re-prefilled mid-decode"
        # Round 3: the dead replica's sessions that were idle at the kill recover now.
        await asyncio.wait_for(asyncio.gather(*(d.complete(2) for d in docs)), timeout=120)
        for d in docs:  # exactly one re-prefill per session of the dead replica, none elsewhere
            assert d.middle.stats.reprefills == (1 if d.replica == dead else 0), f"document {d.index}"
        doomed = sum(d.replica == dead for d in docs)
        assert _opened(survivor) - opened_before == doomed, "each re-prefill opened one session on the survivor"
    finally:
        for d in docs:  # closing ends the streams, so the balancer logs their upgrades
            await d.session.close()
            await d.reference.close()
            await d.middle.aclose()
    return dead, docs


def _settled_log(lb, timeout: float = 10.0) -> list:
    """The access log once nginx has logged the streams just closed (it logs a WebSocket when it
    ends): every routing key with an upgrade line, or what is there after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        accesses = [a for a in lb.accesses() if a.session is not None]
        if {a.session for a in accesses if a.method == "GET"} == {a.session for a in accesses} \
                or time.monotonic() > deadline:
            return accesses
        time.sleep(0.05)


def _check_routing(lb, replicas, dead: int, docs: list[Document]) -> None:
    """From the balancer's log: each routing key went to one replica (HTTP and WebSocket upgrades
    alike) until its replica died, then to the survivor only."""
    name = [_address(r) for r in replicas]
    served: dict[str, list[str]] = {}
    upgrades: set[str] = set()
    for access in _settled_log(lb):
        if access.session is None:
            continue
        assert access.uri.startswith("/v1/sessions"), access
        answered = access.upstreams[-1]  # earlier entries: attempts refused by the dead replica
        path = served.setdefault(access.session, [])
        assert (access.status < 400 or (access.status == 502 and answered == name[dead])  # in flight at the kill
                or (access.status == 404 and path == [name[dead]] and answered == name[1 - dead])), access
        assert all(u == name[dead] for u in access.upstreams[:-1]), access
        if access.method == "GET":
            upgrades.add(access.session)
        if not path or path[-1] != answered:
            path.append(answered)
    assert len(served) == len(docs) and upgrades == set(served), "every session streamed through its key"
    stayed = [p for p in served.values() if p == [name[1 - dead]]]
    moved = [p for p in served.values() if p == [name[dead], name[1 - dead]]]
    assert len(stayed) + len(moved) == len(docs), f"a session hopped between replicas: {served}"
    assert len(moved) == sum(d.replica == dead for d in docs)


def test_render_checks_its_flags_and_nginx_accepts_tls(tmp_path):
    from server.tls import make_self_signed

    nginx = nginx_binary()
    cert, key = make_self_signed(tmp_path / "tls")
    conf = tmp_path / "tls.conf"
    ok = subprocess.run(render_command(["127.0.0.1:9001", "10.0.0.12:8443"], "127.0.0.1:8443", tmp_path,
                                       "--tls-cert", str(cert), "--tls-key", str(key), "-o", str(conf)),
                        capture_output=True, text=True, timeout=30)
    assert ok.returncode == 0, ok.stderr
    text = conf.read_text()
    assert "listen 127.0.0.1:8443 ssl;" in text and "hash $umbra_route consistent;" in text
    assert "server 10.0.0.12:8443 max_fails=1 fail_timeout=10s;" in text and "{{" not in text
    checked = subprocess.run([nginx, "-t", "-p", str(tmp_path), "-e", str(tmp_path / "error.log"), "-c", str(conf)],
                             capture_output=True, text=True, timeout=30)
    assert checked.returncode == 0, checked.stderr
    for bad, why in ((["--tls-cert", str(cert)], "both --tls-cert and --tls-key"),
                     (["--replica", "no-port"], "expected HOST:PORT"),
                     (["--fail-timeout", "0"], "fail_timeout must be > 0")):
        r = subprocess.run(render_command(["127.0.0.1:9001"], "127.0.0.1:8443", tmp_path, *bad),
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 2 and why in r.stderr, r.stderr


def test_readme_shows_what_its_render_command_renders():
    readme = (repo_root() / "README.md").read_text()
    section = readme[readme.index("## Several cloud replicas"):]
    command = re.search(r"^python deploy/nginx/render\.py (?:.*\\\n)*.*$", section, re.M).group(0)
    args = shlex.split(command.replace("\\\n", " "))[2:]
    out = args.index("-o")
    del args[out:out + 2]
    rendered = subprocess.run([sys.executable, str(RENDER), *args], capture_output=True, text=True, timeout=30)
    assert rendered.returncode == 0, rendered.stderr
    shown = re.search(r"```nginx\n(.*?)```", section, re.S).group(1)
    assert shown == rendered.stdout, "README's nginx block is stale: paste the render command's output"
