"""Speculative split decoding under a client bundle (issue 58, DESIGN.md invariants 7 and 8),
through the real cloud service (uvicorn on a loopback socket) with a bundle made as `umbra init`
makes one (INDVocab + LTokenizer) that holds a Python and a Go expert, a secure adapter and a
revealing adapter behind an access key in the real OS keyring.

Exact: with the key held and without, in both languages, every speculative completion equals
step-by-step decoding's under the same bundle (text and tokens), and its drafts really are
accepted. What the cloud sees: the sizes of the frames it receives for the same prompt are one
sequence (the prompt's new ids + k, then k + 1 every frame: a fixed k under a bundle) whatever
the language and whether the key is held — only how far it runs (the completion's length) and
the truncation points differ, which docs/privacy/speculation.md documents. The control: the
adapters do change the tokens and the accepted counts (the ladder of the plain mode would have
shown them in the frame sizes)."""

from __future__ import annotations

import contextlib

import pytest
from tiny_models import build_tiny_model_dir

from adapter_helpers import keys_removed, perturbed_adapter
from securegate.helpers import SMALL_GATE
from server.launch import local_cloud_thread
from umbra import wire
from umbra.engine import ClientModel, CompletionEngine, EngineConfig, StopConfig
from umbra.engine.config import SpeculationConfig
from umbra.engine.speculative import LinkClock, Speculator
from umbra.middle.remote import RemoteMiddle
from umbra.model.adapters import BottleneckConfig, LoraConfig
from umbra.privacy.bundle import BundleConfig, init_bundle
from umbra.privacy.bundle_adapters import add_adapter
from umbra.securegate.bundle_access import add_revealing_adapter
from umbra.securegate.gate import GateConfig

K = 4
LANGS = ("python", "go")
PROMPTS = [  # (prefix, suffix): repetitive code, so prompt lookup finds drafts
    ("import os\n\n\ndef size(path):\n    if os.path.exists(path):\n        return os.path.getsize(path)\n"
     "    return 0\n\n\ndef mtime(path):\n    if os.path.exists(path):\n        return ", "\n    return None\n"),
    ("func a(x int) int {\n\treturn x + 1\n}\n\nfunc b(x int) int {\n\treturn x + 2\n}\n\nfunc c(x int) int {\n\t",
     "\n}\n"),
    ("values = [1, 2, 3]\nfor v in values:\n    print(v)\nfor v in values:\n    ", ""),
]


def _config(mode: str, max_tokens: int = 24) -> EngineConfig:
    return EngineConfig(stop=StopConfig(max_tokens=max_tokens, multiline=True),
                        speculation=SpeculationConfig(mode=mode, k=K))


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("spec-bundle-base")
    build_tiny_model_dir(d, family="llama", style="starcoder")
    return d


@pytest.fixture(scope="module")
def bundle_model(base_dir, tmp_path_factory, module_keystore):
    out = tmp_path_factory.mktemp("spec-bundle") / "bundle"
    init_bundle(base_dir, BundleConfig(epsilon=13.0), out, store=module_keystore)
    model = ClientModel.from_bundle(out, base_dir, store=module_keystore)
    for seed, lang in enumerate(LANGS):
        add_adapter(out, perturbed_adapter(model, lang, LoraConfig(rank=4), seed), role="expert", language=lang)
    add_adapter(out, perturbed_adapter(model, "secure", BottleneckConfig(size=8), 6), role="secure")
    add_revealing_adapter(out, perturbed_adapter(model, "team", BottleneckConfig(size=8), 7), "team-key",
                          module_keystore,
                          gate_config=GateConfig(**SMALL_GATE))  # the suite's small gate: the gate itself is tests/securegate's
    return ClientModel.from_bundle(out, base_dir, store=module_keystore)




def _frame_sizes(sent: list[bytes]) -> list[tuple[int, int | None]]:
    """(positions, the trim's start or None) of every forward frame the cloud received, in order."""
    out = []
    for payload in sent:
        if payload.startswith(wire.MAGIC):
            frame = wire.decode(payload)
            if frame.kind in (wire.Kind.FORWARD, wire.Kind.FORWARD_TRIM):
                trim = frame.start if frame.kind == wire.Kind.FORWARD_TRIM else None
                out.append((frame.tensors[0].shape[1], trim))
    return out


async def _complete_all(model, cloud, language: str, mode: str):
    """Each prompt in a new session of one engine: (text, tokens, counts, frames the cloud got)."""
    results = []
    for prefix, suffix in PROMPTS:
        sent: list[bytes] = []
        tap = lambda d, p: sent.append(bytes(p)) if d == "sent" else None  # noqa: E731
        async with RemoteMiddle(cloud.base_url, cloud.token, hidden_size=model.spec.hidden_size, tap=tap) as middle:
            engine = CompletionEngine.split(model, middle, _config(mode), context_length=middle.info["max_seq_len"])
            _, adapters = engine.route(language)
            async with engine.session() as session:
                got = await session.complete(prefix, suffix, adapters=adapters)
        results.append((got.text, got.tokens, got.speculation, _frame_sizes(sent), got.adapters))
    return results


async def test_speculation_under_a_bundle_is_exact_and_its_frame_sizes_do_not_depend_on_language_or_key(
        bundle_model, base_dir, module_keystore):
    runs = {}
    with local_cloud_thread(base_dir, bundle_model.plan, settings={"torch_threads": 1}) as cloud:
        for keyed in (True, False):
            with contextlib.nullcontext() if keyed else keys_removed(bundle_model, module_keystore):
                for language in LANGS:
                    spec = await _complete_all(bundle_model, cloud, language, "on")
                    plain = await _complete_all(bundle_model, cloud, language, "off")
                    runs[(language, keyed)] = spec
                    for i, (s, p) in enumerate(zip(spec, plain)):
                        assert (s[0], s[1]) == (p[0], p[1]), (language, keyed, i)  # exact
                        assert ("team" in s[4]) == keyed and ("secure" in s[4]) != keyed
                        assert s[2] is not None and s[2].frames > 0 and p[2] is None
    accepted = 0
    for i in range(len(PROMPTS)):
        views = {route: results[i] for route, results in runs.items()}
        sizes = {route: [n for n, _ in r[3]] for route, r in views.items()}
        longest = max(sizes.values(), key=len)
        for route, seq in sizes.items():
            assert seq == longest[: len(seq)], (i, route, seq, longest)  # one sequence, cut at the end
            assert all(n == K + 1 for n in seq[1:]), (i, route, seq)  # a fixed k under a bundle
        for r in views.values():
            accepted += r[2].lookup_accepted + r[2].model_accepted
    assert accepted > 0  # drafts really were accepted
    # the control: the adapters change the tokens, so the acceptance (which the ladder would show)
    tokens = {route: [r[1] for r in results] for route, results in runs.items()}
    trims = {route: [r[3] for r in results] for route, results in runs.items()}
    assert tokens[("python", True)] != tokens[("python", False)] or tokens[("python", True)] != tokens[("go", True)]
    assert len({repr(t) for t in trims.values()}) > 1


def test_auto_speculates_under_a_bundle_with_a_fixed_k():
    """`auto` decides on the mode, the link and its measured trip alone, bundle or not (no
    acceptance, language or key); under a bundle every frame has k drafts (no ladder)."""
    clock = LinkClock()
    spec = Speculator(None, clock)
    auto = SpeculationConfig(mode="auto", k=4, k_max=16)
    assert not spec.wanted(auto, greedy=True, private=True)  # nothing measured yet
    clock.observe(0.5)  # a 500 ms trip
    assert spec.wanted(auto, greedy=True, private=True) and spec.wanted(auto, greedy=True, private=False)
    assert not spec.wanted(auto, greedy=True, private=True, remote=False)
    assert Speculator.ladder(auto, private=True) == (4,) and Speculator.ladder(auto, private=False) == (4, 8, 16)
