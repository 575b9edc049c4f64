"""Attack (d): code reconstruction (NOIR's CodeRA) — the cloud finishes the model itself.

It feeds the received states through the public middle blocks (it computed their output
anyway) and then the PUBLIC decoder blocks, final norm and head, and reads the argmax token at
each position as its guess of the NEXT token. Decoded with the public tokenizer, that is the
client's code shifted by one position (and, at a sequence's last position, a guess of the token
the client is about to generate). Position 0 gets no guess.

Under LTokenizer alone this works unchanged: π permutes the client's embedding and head rows
consistently, so the states on the wire are those of the public model (docs/privacy/ltokenizer.md)."""

from __future__ import annotations

import numpy as np
import torch

from umbra.attacks.public import PublicModel
from umbra.attacks.transcript import ObservedSequence


class CodeReconstruction:
    name = "reconstruction"

    def __init__(self, public: PublicModel):
        self.public = public
        self.allowed = public.text_ids  # guess text tokens only (the head may favour specials)

    @torch.no_grad()
    def guess(self, seq: ObservedSequence) -> np.ndarray:
        logits = self.public.logits(seq.hidden.float(), seq.positions, seq.output)
        logits = logits.masked_fill(~self.allowed, float("-inf"))
        nxt = logits.argmax(-1).numpy().astype(np.int64)  # guess of the token at t + 1
        out = np.full(seq.length, -1, dtype=np.int64)
        out[1:] = nxt[:-1]
        return out

    def run(self, sequences: list[ObservedSequence]) -> list[np.ndarray]:
        return [self.guess(s) for s in sequences]
