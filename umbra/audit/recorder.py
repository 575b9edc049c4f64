"""The client side of `umbra audit`: record what a completion sends, next to the truth.

    async with audit_recording(model, middle) as middle:      # a no-op unless auditing is on
        engine = CompletionEngine.split(model, middle, ...)
        await engine.complete(prefix, suffix)

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

from umbra.audit.settings import audit_enabled
from umbra.audit.store import AuditStore
from umbra.middle.protocol import Middle
from umbra.privacy.attacks.recorder import RecordingMiddle, truth_from_encoder

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
                     bundle_id=bundle.manifest.bundle_id)
    return facts


@contextlib.asynccontextmanager
async def audit_recording(model, middle: Middle, *, enabled: bool | None = None,
                          store: AuditStore | None = None) -> AsyncIterator[Middle]:
    """Yield the Middle to complete through: `middle` itself, or a recording wrapper."""
    if not (audit_enabled() if enabled is None else enabled):
        yield middle
        return
    store = store or AuditStore()
    store.prepare()
    recorder = RecordingMiddle(middle, keep_outputs=False)
    bundle = getattr(model, "bundle", None)
    wire_dtype = getattr(middle, "wire_dtype", None)
    try:
        with truth_from_encoder(model.encoder, recorder, None if bundle is None else bundle.permutation):
            yield recorder
    finally:
        sequences = [s for s in recorder.sequences() if s.truth is not None]
        if sequences:
            facts = request_facts(model) | {"wire_dtype": None if wire_dtype is None else str(wire_dtype)}
            path = store.save(facts, sequences)
            log.info("audit: recorded %d sequence(s) in %s", len(sequences), path.name)
