"""The client side of `umbra audit`: record what a completion sends, next to the truth.

    async with audit_recording(model, middle) as middle:      # a no-op unless auditing is on
        engine = CompletionEngine.split(model, middle, ...)
        await engine.complete(prefix, suffix)

Long-running clients (the language server, `umbra serve`) hold an `AuditTap` instead: its
`middle` records, `flush_closed()` saves the sessions that have closed since (after each
completion), and `close()` saves the rest at shutdown — one encrypted file per flush.

When auditing is on, the Middle is wrapped in a RecordingMiddle (the hidden states and positions
exactly as the cloud receives them) and the client's encoder gets a hook that attaches the ids it
ran — mapped to public ids through the bundle's π, in memory — as the truth of each forward.
On exit the sequences go to the encrypted AuditStore (the store and its keyring key are made
ready before anything is sent, so a missing keyring fails the command, never the recording)."""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import AsyncIterator

from umbra.attacks.recorder import RecordingMiddle, truth_from_encoder
from umbra.audit.settings import audit_enabled
from umbra.audit.store import AuditStore
from umbra.middle.protocol import Middle

log = logging.getLogger(__name__)


def request_facts(model) -> dict:
    """What the report needs to know about the client that sent the traffic (no secrets)."""
    bundle = getattr(model, "bundle", None)
    facts = dict(model_dir=str(model.model_dir), encoder_blocks=model.plan.encoder_blocks,
                 decoder_blocks=model.plan.decoder_blocks, hidden_size=model.spec.hidden_size)
    if bundle is None:
        facts.update(epsilon=None, indvocab=False, ltokenizer=False, bundle_id=None)
    else:
        eps = bundle.manifest.epsilon
        facts.update(epsilon="inf" if math.isinf(eps) else eps, indvocab=True, ltokenizer=True,
                     bundle_id=bundle.manifest.bundle_id, h=bundle.manifest.h,
                     # the STuning record (`TuneConfig.trajectory()` + "cloud_lora"; None: untuned): the
                     # adaptive attacker of `umbra audit` tunes its shadow client the same way
                     stuning=(bundle.manifest.privacy or {}).get("stuning"))
    return facts


class AuditTap:
    """Records what `middle` sends for `model`'s completions and saves it to the AuditStore.
    The store (and its keyring key) is made ready here, before anything is sent."""

    def __init__(self, model, middle: Middle, store: AuditStore | None = None):
        self.store = store or AuditStore()
        self.store.prepare()
        self.middle = RecordingMiddle(middle, keep_outputs=False)
        wire_dtype = getattr(middle, "wire_dtype", None)
        self.facts = request_facts(model) | {"wire_dtype": None if wire_dtype is None else str(wire_dtype)}
        bundle = getattr(model, "bundle", None)
        self._truth = truth_from_encoder(model.encoder, self.middle, None if bundle is None else bundle.permutation)
        self._truth.__enter__()
        self.closed = False
        self._context_files: set[str] = set()  # open files whose snippets were in a prompt since the last save

    def note_context(self, files) -> None:
        """Names of open files a completion's prompt took context from (kept locally in the
        record's facts, `context_files`; never their text, never sent)."""
        self._context_files.update(files)

    def _save(self, sequences) -> None:
        sequences = [s for s in sequences if s.truth is not None]
        if sequences:
            facts = self.facts | ({"context_files": sorted(self._context_files)} if self._context_files else {})
            self._context_files = set()
            path = self.store.save(facts, sequences)
            log.info("audit: recorded %d sequence(s) in %s", len(sequences), path.name)

    def flush_closed(self) -> None:
        """Save the sessions that have closed (their whole history is known)."""
        if not self.closed:
            self._save(self.middle.take_closed())

    def close(self) -> None:
        """Save everything still held and stop recording. Idempotent."""
        if self.closed:
            return
        self.closed = True
        try:
            self._save(self.middle.sequences())
        finally:
            self.middle.clear()
            self._truth.__exit__(None, None, None)


@contextlib.asynccontextmanager
async def audit_recording(model, middle: Middle, *, enabled: bool | None = None,
                          store: AuditStore | None = None) -> AsyncIterator[Middle]:
    """Yield the Middle to complete through: `middle` itself, or a recording wrapper."""
    if not (audit_enabled() if enabled is None else enabled):
        yield middle
        return
    tap = AuditTap(model, middle, store)
    try:
        yield tap.middle
    finally:
        tap.close()
