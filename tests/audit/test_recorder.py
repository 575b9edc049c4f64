"""The completion path's audit hook: a no-op when auditing is off; when on, the recording holds
exactly the hidden states and positions the Middle received, next to the public ids behind
them — also for a bundle, whose private ids are mapped back through π in memory."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tiny_models import build_tiny_model_dir

from umbra.attacks.recorder import RecordingMiddle
from umbra.audit import audit_recording
from umbra.audit.settings import set_enabled
from umbra.audit.store import AuditStore
from umbra.engine import ClientModel, CompletionEngine, EngineConfig, StopConfig
from umbra.middle.local import LocalMiddle
from umbra.privacy.bundle import BundleConfig, init_bundle

CONFIG = EngineConfig(stop=StopConfig(max_tokens=4, multiline=True))
PREFIX = "import os\n\n\ndef read_config(path):\n    if os.path.exists(path):\n        return "
SUFFIX = "\n    return None\n"


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("audit-base")
    build_tiny_model_dir(d, family="llama", style="starcoder")
    return d


class Spy(LocalMiddle):
    """A real LocalMiddle that keeps what it was sent."""

    def __init__(self, blocks):
        super().__init__(blocks)
        self.sent = []

    async def forward(self, hidden, positions, session, key_padding=None):
        self.sent.append((hidden.detach().clone(), positions.clone()))
        return await super().forward(hidden, positions, session, key_padding)


async def _complete(model, middle, store, enabled=None):
    async with audit_recording(model, middle, enabled=enabled, store=store) as m:
        engine = CompletionEngine.split(model, m, CONFIG)
        return m, await engine.complete(PREFIX, SUFFIX)


async def test_off_by_default_records_nothing(base_dir, keystore, tmp_path):
    model = ClientModel.load(base_dir)
    middle = LocalMiddle(model.load_middle())
    store = AuditStore(tmp_path / "a", keystore)
    used, result = await _complete(model, middle, store)
    assert used is middle and result.generated_tokens > 0
    assert store.paths() == [] and not (tmp_path / "a").exists()


async def test_records_what_was_sent_next_to_the_public_ids(base_dir, keystore, tmp_path):
    set_enabled(True)
    model = ClientModel.load(base_dir)
    spy = Spy(model.load_middle())
    store = AuditStore(tmp_path / "a", keystore)
    used, result = await _complete(model, spy, store)
    assert isinstance(used, RecordingMiddle)
    (rec,) = store.records()
    assert rec.meta["epsilon"] is None and not rec.meta["indvocab"] and rec.meta["model_dir"] == str(base_dir)
    (seq,) = rec.sequences
    sent_hidden = torch.cat([h[0] for h, _ in spy.sent])
    assert torch.equal(seq.hidden, sent_hidden) and torch.equal(seq.positions, torch.cat([p[0] for _, p in spy.sent]))
    assert seq.fresh.all() and seq.length == result.prompt_tokens + result.generated_tokens - 1
    decoded = model.tokenizer.decode(seq.truth.tolist())
    assert PREFIX.strip() in decoded and SUFFIX.strip() in decoded


async def test_bundle_truth_is_mapped_to_public_ids(base_dir, keystore, tmp_path):
    bundle = tmp_path / "bundle"
    init_bundle(base_dir, BundleConfig(epsilon=27.0), bundle, store=keystore)
    model = ClientModel.from_bundle(bundle, base_dir, store=keystore)
    public = ClientModel.load(base_dir).tokenizer
    store = AuditStore(tmp_path / "a", keystore)
    await _complete(model, LocalMiddle(model.load_middle()), store, enabled=True)
    (rec,) = store.records()
    assert rec.meta["epsilon"] == 27.0 and rec.meta["indvocab"] and rec.meta["ltokenizer"]
    truth = rec.sequences[0].truth
    assert PREFIX.strip() in public.decode(truth.tolist())  # public ids: the public tokenizer reads them
    private = np.asarray(model.bundle.permutation.to_private(truth))
    assert not np.array_equal(private, truth)


async def test_a_tap_saves_each_session_once_it_closes_and_the_rest_at_close(base_dir, keystore, tmp_path):
    """Long-running servers: a warm session's requests (prefix reuse) are saved as one sequence
    when it closes; an open session stays in memory until the tap closes."""
    from umbra.audit import AuditTap

    model = ClientModel.load(base_dir)
    store = AuditStore(tmp_path / "a", keystore)
    tap = AuditTap(model, LocalMiddle(model.load_middle()), store)
    engine = CompletionEngine.split(model, tap.middle, CONFIG)
    warm, other = engine.new_session(), engine.new_session()
    first = await warm.complete(PREFIX, SUFFIX)
    second = await warm.complete(PREFIX + "p", SUFFIX)  # one keystroke: mostly reused
    assert second.reused_tokens > 0
    await other.complete("x = ", "")
    tap.flush_closed()
    assert store.paths() == []  # nothing closed yet
    await warm.close()
    tap.flush_closed()
    (rec,) = store.records()
    fresh = sum(int(q.fresh.sum()) for q in rec.sequences)  # one sequence per branch after a truncate
    assert fresh == first.prompt_tokens + first.generated_tokens - 1 + second.recomputed_tokens + second.generated_tokens - 1
    assert PREFIX.strip() in model.tokenizer.decode(rec.sequences[0].truth.tolist())
    tap.flush_closed()
    assert len(store.paths()) == 1  # saved once
    tap.close()
    tap.close()
    assert len(store.paths()) == 2  # the still-open session, at close
    assert "x =" in model.tokenizer.decode(store.records()[-1].sequences[0].truth.tolist())


async def test_the_record_lists_the_open_files_a_prompt_took_context_from_by_name_only(base_dir, keystore, tmp_path):
    from umbra.audit import AuditTap
    from umbra.engine.context import RepoContext, Snippet

    model = ClientModel.load(base_dir)
    store = AuditStore(tmp_path / "a", keystore)
    tap = AuditTap(model, LocalMiddle(model.load_middle()), store)
    engine = CompletionEngine.split(model, tap.middle, CONFIG)
    secret_text = "def helper_only_in_util(x):\n    return x\n"
    context = RepoContext("pkg/main.py", "python", (Snippet("pkg/util.py", secret_text),), 64)
    async with engine.session() as s:
        result = await s.complete(PREFIX, SUFFIX, context=context)
        tap.note_context(result.context_files)
    tap.flush_closed()
    (rec,) = store.records()
    assert result.context_files == ("pkg/util.py",) and rec.meta["context_files"] == ["pkg/util.py"]
    assert "helper_only_in_util" not in repr(rec.meta)
    await engine.complete("x = ", "")  # a later record without context lists none
    tap.close()
    assert "context_files" not in store.records()[-1].meta
