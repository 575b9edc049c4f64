"""The access gate (seed 003 §4.4, App. E): a small GLU + GELU MLP over the key position's state
that routes a request to the secure adapter (class 0) or to one revealing adapter (class j ≥ 1).

    states = KeyEncoder(encoder, bundle_id).key_states([secret])          # [N, C], client only
    gate, report = train_gate(key_encoder, {"team-a": [secret]}, GateConfig())
    cls = gate.route(states)                                               # [N] long, 0 = secure

The state is the client encoder's output at position 0 of `[KEY] prompt`; with causal attention
it depends on the key alone, so the gating pass runs the key position only (no prompt, no soft
prompt, never the Middle) — tests/securegate/test_gate.py checks the equivalence. The gate is
trained on the valid keys' states against every kind of key that must NOT open anything: random
keys (wrong keys), malformed ones (bit flips, cuts and extensions of each valid key), the valid
secrets under other bundle ids, the empty key, and no key at all (a prompt token at position 0).
After each fit, states drawn from a Gaussian fitted to the random keys' states (no encoder pass,
tens of thousands at a time) that the gate does not send to the secure adapter join training as
hard negatives, and the gate is refitted (`mine_synthetic`). Training ends only when fresh requests
of every class route right (`check_per_class` each); hard negatives found by that check join the
next round. Below the confidence threshold τ the choice falls back to the secure adapter, and so
does a revealing choice whose state is not within `anchor_cos` of one of that adapter's valid keys'
states (standardized; its anchors): a key's state depends on the key alone, so a valid request
lands on its anchor exactly, while a random key's state has cosine ~ N(0, 1/C) with it. The MLP's
rare false accepts (about 1e-3 of random keys with the default model's 256-dim states, where the
mining above can keep a check from ever passing: experiments/gate_false_accepts.py) then need to
hit an anchor too. The gate only routes: the revealing adapter is sealed (sealing.py), so a gate
fooled into choosing it still opens nothing without the key."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save
from torch import nn

from umbra.errors import ConfigError
from umbra.model.adapters.files import safetensors_metadata
from umbra.model.parts import ClientEncoder
from umbra.securegate.errors import GateError
from umbra.securegate.key_embedding import key_embeddings

FORMAT = "umbra-key-gate/v1"
KEY_CLASSES = ("valid", "random", "malformed", "other-bundle", "empty", "absent")


@dataclass
class GateConfig:
    hidden: int = 64  # width of the GLU (the paper's "small MLP")
    threshold: float = 0.9  # τ: a choice with lower confidence falls back to the secure adapter
    steps: int = 300  # Adam steps per training round
    lr: float = 3e-3
    random_keys: int = 2048  # fresh random keys per round (wrong keys)
    near_misses: int = 2048  # per round: embeddings between a valid key's and a random one (training only)
    malformed_per_key: int = 32  # mutations of each valid key per round
    other_bundle_per_key: int = 8  # each valid secret under random other bundle ids, per round
    absent_tokens: int = 1024  # vocabulary tokens at position 0: requests without a key
    check_per_class: int = 4000  # fresh requests per key class that must all route right (≥ 1000)
    max_rounds: int = 6  # training rounds, misrouted checks added as hard negatives
    synthetic: int = 65536  # per mining pass: states drawn around the random keys' (no encoder pass)
    mine_passes: int = 4  # mining passes after each round's fit, at most (0: no mining)
    mine_steps: int = 100  # Adam steps of the refit after a mining pass found false accepts
    anchor_cos: float = 0.99  # a revealing route needs cosine ≥ this with one of its keys' states (0: off)
    seed: int = 0  # draws of the training negatives (not secrets: random keys that open nothing)

    def __post_init__(self):
        if not 0.5 <= self.threshold < 1:
            raise ConfigError(f"gate threshold must be in [0.5, 1), got {self.threshold}")
        for name in ("hidden", "steps", "random_keys", "check_per_class", "max_rounds", "mine_steps"):
            if getattr(self, name) < 1:
                raise ConfigError(f"gate {name} must be ≥ 1")
        if self.synthetic < 0 or self.mine_passes < 0:
            raise ConfigError("gate synthetic and mine_passes must be ≥ 0")
        if not 0 <= self.anchor_cos < 1:
            raise ConfigError(f"gate anchor_cos must be in [0, 1), got {self.anchor_cos}")

    @classmethod
    def from_dict(cls, data: dict) -> "GateConfig":
        try:
            return cls(**data)
        except TypeError as exc:
            raise ConfigError(f"malformed gate config: {exc}") from exc


class KeyEncoder:
    """The gating pass's front half: a key (or a token) at position 0 through the client's
    embedding and encoder blocks, without adapters, on the client alone."""

    def __init__(self, encoder: ClientEncoder, bundle_id: str):
        self.encoder = encoder
        self.bundle_id = bundle_id
        weight = encoder.embed_tokens.weight
        self.dim, self.dtype = weight.shape[1], weight.dtype
        self.scale = float(weight.detach().float().std())

    @torch.no_grad()
    def embeds_states(self, embeds: torch.Tensor, batch: int = 512) -> torch.Tensor:
        """embeds [N, C] at position 0 → encoder output there [N, C] (float32)."""
        out = []
        for i in range(0, embeds.shape[0], batch):
            e = embeds[i:i + batch].to(self.dtype)[:, None, :]  # [n, 1, C]
            pos = torch.zeros(e.shape[0], 1, dtype=torch.long)
            out.append(self.encoder(None, pos, embeds=e)[:, 0].float())
        return torch.cat(out) if out else torch.zeros(0, self.dim)

    def key_states(self, secrets_: list[bytes], bundle_id: str | None = None) -> torch.Tensor:
        emb = key_embeddings(secrets_, bundle_id or self.bundle_id, self.dim, self.scale)
        return self.embeds_states(emb)

    def token_states(self, ids: torch.Tensor) -> torch.Tensor:
        return self.embeds_states(self.encoder.embed(ids.long()).detach())


class KeyGate(nn.Module):
    """logits [N, 1 + K] = W_o (GELU(W_g x) ⊙ W_u x), x = z / rms(z), z = (h − μ) / σ per feature,
    μ and σ from states of random keys (set when training starts). Standardized, a random key's z is
    about N(0, I), so the encoder's common component no longer makes every state look alike; on the
    sphere the region around a valid key is a cap, which one linear unit cuts out exactly (random
    points have cosine ~ N(0, 1/C) with it). The anchors [P, C] are the valid keys' x, with their
    classes [P]: a revealing route also needs x within `anchor_cos` of one of its own."""

    def __init__(self, dim: int, classes: tuple[str, ...], config: GateConfig, anchors: int = 0):
        super().__init__()
        if not classes or len(set(classes)) != len(classes):
            raise GateError("a gate routes to one or more distinct revealing adapters")
        self.classes, self.config = tuple(classes), config
        self.w_gate = nn.Linear(dim, config.hidden)
        self.w_up = nn.Linear(dim, config.hidden)
        self.w_out = nn.Linear(config.hidden, 1 + len(classes))
        self.register_buffer("center", torch.zeros(dim))
        self.register_buffer("spread", torch.ones(dim))
        self.register_buffer("anchors", torch.zeros(anchors, dim))
        self.register_buffer("anchor_class", torch.zeros(anchors, dtype=torch.long))

    def standardize_on(self, h: torch.Tensor) -> None:
        """Set μ, σ from states of random keys [N, C]."""
        self.center.copy_(h.float().mean(0))
        self.spread.copy_(h.float().std(0).clamp(min=1e-6))

    def set_anchors(self, h: torch.Tensor, classes: torch.Tensor) -> None:
        """The valid keys' states [P, C] and their classes [P] (≥ 1); after standardize_on."""
        self.anchors = self._x(h).detach()
        self.anchor_class = classes.long().clone()

    def _x(self, h: torch.Tensor) -> torch.Tensor:  # h [N, C] -> x [N, C], standardized, rms 1
        z = (h.float() - self.center) / self.spread
        return z * torch.rsqrt(z.pow(2).mean(-1, keepdim=True) + 1e-6)

    def forward(self, h: torch.Tensor) -> torch.Tensor:  # h [N, C] -> logits [N, 1 + K]
        x = self._x(h)
        return self.w_out(nn.functional.gelu(self.w_gate(x)) * self.w_up(x))

    @torch.no_grad()
    def route(self, h: torch.Tensor) -> torch.Tensor:
        """[N] class per state: argmax, or 0 (secure) when its probability is below τ or, for a
        revealing class, when the state is not within `anchor_cos` of one of that class's anchors."""
        p = self.forward(h).softmax(-1)
        conf, cls = p.max(-1)
        keep = conf >= self.config.threshold
        if self.anchors.shape[0] and self.config.anchor_cos > 0:
            cos = self._x(h) @ self.anchors.T / h.shape[-1]  # [N, P]; both have rms 1
            near = ((cos >= self.config.anchor_cos) & (self.anchor_class[None, :] == cls[:, None])).any(-1)
            keep &= near | (cls == 0)
        return torch.where(keep, cls, torch.zeros_like(cls))

    def adapter_of(self, cls: int) -> str | None:
        return None if cls == 0 else self.classes[cls - 1]


@dataclass
class GateReport:
    rounds: int
    seconds: float
    accuracy: dict = field(default_factory=dict)  # key class -> share routed right in the final check
    checked: dict = field(default_factory=dict)  # key class -> requests checked
    mined: int = 0  # synthetic states the gate sent away from the secure adapter, trained on as negatives


def _mutations(secret: bytes, rng: np.random.Generator, n: int) -> list[bytes]:
    """Malformed variants of a key: one or a few bits flipped, cut short, extended, a byte changed."""
    out = []
    for i in range(n):
        b = bytearray(secret)
        kind = i % 4
        if kind == 0:
            for _ in range(int(rng.integers(1, 4))):
                j = int(rng.integers(len(b) * 8))
                b[j // 8] ^= 1 << (j % 8)
        elif kind == 1:
            b = b[: int(rng.integers(0, len(b)))]
        elif kind == 2:
            b += rng.bytes(int(rng.integers(1, 8)))
        else:
            b[int(rng.integers(len(b)))] = int(rng.integers(256))
        out.append(bytes(b) if bytes(b) != secret else bytes(b) + b"\x00")
    return out


def negative_requests(enc: KeyEncoder, valid: list[bytes], rng: np.random.Generator, n_random: int,
                      n_malformed: int, n_other: int, n_absent: int) -> dict[str, torch.Tensor]:
    """Fresh states of every class that must route to the secure adapter, by class (the counts
    of malformed and other-bundle requests are spread over the valid keys)."""
    vocab = enc.encoder.embed_tokens.weight.shape[0]
    per = lambda n: -(-n // len(valid))  # noqa: E731  (ceil over the valid keys)
    other = [enc.key_states(valid, bundle_id=rng.bytes(16).hex()) for _ in range(per(n_other))]
    return {
        "random": enc.key_states([rng.bytes(32) for _ in range(n_random)]),
        "malformed": enc.key_states([m for s in valid for m in _mutations(s, rng, per(n_malformed))]),
        "other-bundle": torch.cat(other),
        "empty": enc.key_states([b""]),
        "absent": enc.token_states(torch.from_numpy(rng.integers(0, vocab, n_absent))),
    }


def near_misses(enc: KeyEncoder, valid: list[bytes], rng: np.random.Generator, n: int) -> torch.Tensor:
    """States of embeddings on the way from a valid key's to a random one, (1 − t)·e_valid + t·e_rand
    with t ~ U(0.15, 1): negatives close to the valid points, so the gate learns a tight region
    around each of them rather than a half-space that a rare random key can fall into."""
    if n < 1:
        return torch.zeros(0, enc.dim)
    e_valid = key_embeddings(valid, enc.bundle_id, enc.dim, enc.scale)  # [K, C]
    pick = torch.from_numpy(rng.integers(0, len(valid), n))
    e_rand = torch.from_numpy(rng.standard_normal((n, enc.dim))).float() * enc.scale
    t = torch.from_numpy(rng.uniform(0.15, 1.0, (n, 1))).float()
    return enc.embeds_states((1 - t) * e_valid[pick] + t * e_rand)


class RandomKeyStates:
    """N(μ, Σ) of the random keys' states [R, C], to draw more like them without an encoder pass:
    μ + g·diag(S)·Vᵀ/√(R−1) with g ~ N(0, I_k), from the SVD of the centered states (k = min(R, C))."""

    def __init__(self, states: torch.Tensor):
        states = states.float()
        self.mean = states.mean(0)  # [C]
        _, sv, vh = torch.linalg.svd(states - self.mean, full_matrices=False)  # sv [k], vh [k, C]
        self.factor = sv[:, None] * vh / max(states.shape[0] - 1, 1) ** 0.5  # [k, C]

    def draw(self, n: int, gen: torch.Generator, scale: float = 1.0) -> torch.Tensor:  # -> [n, C]
        return self.mean + scale * (torch.randn(n, self.factor.shape[0], generator=gen) @ self.factor)


def mine_synthetic(gate: KeyGate, source: RandomKeyStates, n: int, gen: torch.Generator,
                   batch: int = 8192) -> torch.Tensor:
    """States the gate does not send to the secure adapter with p ≥ 0.5, among `n` drawn from
    N(μ, s²Σ) of the random keys' states (s = 1 and 1.5, batch by batch) → [M, C].

    Why: a misrouted random key lies far from every valid key (cosine < 0 in the tiny model's
    64-dim states), where GELU's negative lobe times a negative up-projection makes a revealing
    logit large; the few thousand real negatives of a round rarely land there, so the gate's false
    accepts (~1e-4) were where its training data was not. Gaussian draws cost a matmul, not an
    encoder pass, so a pass looks at tens of thousands of states and finds those regions."""
    found = []
    with torch.no_grad():
        for i in range(0, n, batch):
            states = source.draw(min(batch, n - i), gen, scale=1.0 if (i // batch) % 2 == 0 else 1.5)  # [m, C]
            found.append(states[gate(states).softmax(-1)[:, 0] < 0.5])
    return torch.cat(found) if found else torch.zeros(0, source.mean.shape[0])


def _fit(gate: KeyGate, pos: torch.Tensor, pos_y: torch.Tensor, neg: torch.Tensor, config: GateConfig,
         steps: int) -> None:
    """`steps` Adam steps of class-balanced cross-entropy: valid states [P, C] → their classes,
    negatives [N, C] → 0 (secure)."""
    x = torch.cat([pos, neg])
    y = torch.cat([pos_y, torch.zeros(neg.shape[0], dtype=torch.long)])
    counts = torch.bincount(y, minlength=1 + len(gate.classes)).clamp(min=1).float()
    weight = (1.0 / counts) / (1.0 / counts).sum()  # every class weighs the same in the loss
    opt = torch.optim.Adam(gate.parameters(), lr=config.lr)
    for _ in range(steps):
        loss = nn.functional.cross_entropy(gate(x), y, weight=weight)
        opt.zero_grad()
        loss.backward()
        opt.step()


def train_gate(enc: KeyEncoder, valid: dict[str, list[bytes]], config: GateConfig | None = None
               ) -> tuple[KeyGate, GateReport]:
    """A gate routing each adapter's valid keys to it and everything else to the secure adapter,
    checked on fresh requests of every key class (GateError if it never routes them all right)."""
    config = config or GateConfig()
    classes = tuple(sorted(valid))
    if not classes or any(not v for v in valid.values()):
        raise GateError("the gate needs at least one valid key for each revealing adapter")
    t0 = time.perf_counter()
    torch.manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    gate = KeyGate(enc.dim, classes, config)
    secrets_ = [s for c in classes for s in valid[c]]
    pos = enc.key_states(secrets_)
    pos_y = torch.tensor([1 + i for i, c in enumerate(classes) for _ in valid[c]])
    hard = torch.zeros(0, enc.dim)
    random_states = enc.key_states([rng.bytes(32) for _ in range(config.random_keys)])
    gate.standardize_on(random_states)
    gate.set_anchors(pos, pos_y)
    source, gen, mined = RandomKeyStates(random_states), torch.Generator().manual_seed(config.seed), 0
    for rounds in range(1, config.max_rounds + 1):
        neg = torch.cat([*negative_requests(enc, secrets_, rng, config.random_keys, config.malformed_per_key * len(secrets_),
                                            config.other_bundle_per_key * len(secrets_), config.absent_tokens).values(),
                         near_misses(enc, secrets_, rng, config.near_misses)])
        _fit(gate, pos, pos_y, torch.cat([neg, hard]), config, config.steps)
        for _ in range(config.mine_passes):  # while Gaussian draws find false accepts, refit with them
            found = mine_synthetic(gate, source, config.synthetic, gen)
            if not found.shape[0]:
                break
            hard, mined = torch.cat([hard, found]), mined + found.shape[0]
            _fit(gate, pos, pos_y, torch.cat([neg, hard]), config, config.mine_steps)
        n = config.check_per_class
        checks = negative_requests(enc, secrets_, rng, n, n, n, n)
        accuracy, checked, missed = {}, {}, []
        valid_routes = gate.route(pos)
        reps = -(-config.check_per_class // len(secrets_))  # the same key, asked again and again
        accuracy["valid"] = float((valid_routes == pos_y).float().mean())
        checked["valid"] = reps * len(secrets_)
        for name, states in checks.items():
            routes = gate.route(states)
            accuracy[name] = float((routes == 0).float().mean())
            checked[name] = states.shape[0] if name != "empty" else config.check_per_class
            missed.append(states[routes != 0])
        if all(a == 1.0 for a in accuracy.values()):
            return gate.eval(), GateReport(rounds, time.perf_counter() - t0, accuracy, checked, mined)
        hard = torch.cat([hard, *missed])
    raise GateError(f"the access gate did not route every check right after {config.max_rounds} rounds "
                    f"({', '.join(f'{k} {v:.4f}' for k, v in accuracy.items())}); raise max_rounds or hidden")


# -- files -----------------------------------------------------------------------------------------

def gate_bytes(gate: KeyGate) -> bytes:
    meta = {"format": FORMAT, "classes": json.dumps(list(gate.classes)), "config": json.dumps(asdict(gate.config))}
    return st_save({k: v.detach().contiguous() for k, v in gate.state_dict().items()}, metadata=meta)


def gate_from_bytes(data: bytes, where: str) -> KeyGate:
    try:
        meta = safetensors_metadata(data)
        if meta.get("format") != FORMAT:
            raise GateError(f"{where} is not an Umbra key gate")
        tensors = st_load(data)
        classes = tuple(json.loads(meta["classes"]))
        config = GateConfig.from_dict(json.loads(meta["config"]))
        dim = tensors["w_gate.weight"].shape[1]
        if "anchors" not in tensors:  # a gate saved before anchors: MLP and τ only
            tensors.update(anchors=torch.zeros(0, dim), anchor_class=torch.zeros(0, dtype=torch.long))
        gate = KeyGate(dim, classes, config, anchors=tensors["anchors"].shape[0])
        gate.load_state_dict(tensors)
    except GateError:
        raise
    except (SafetensorError, KeyError, ValueError, TypeError, RuntimeError, ConfigError) as exc:
        raise GateError(f"{where} is not a usable key gate: {exc}") from exc
    if not all(torch.isfinite(p).all() for p in gate.parameters()):
        raise GateError(f"{where} holds non-finite weights")
    return gate.eval().requires_grad_(False)
