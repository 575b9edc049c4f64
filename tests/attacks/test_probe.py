"""The inversion probe's fit (umbra/attacks/probe.py): it learns states → ids, trains where
`training_device` says (an accelerator when there is one) and always hands back a CPU probe."""

from __future__ import annotations

import pytest
import torch

from umbra.attacks.probe import InversionProbe, training_device
from umbra.attacks.probe_config import ProbeConfig

VOCAB, DIM = 12, 16
CONFIG = ProbeConfig(window=1, hidden=32, epochs=30, batch=64, lr=1e-2, seed=3)


def _toy(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Noisy states of ids [N,T] (drawn by `seed`) from one fixed random table: learnable, not trivially."""
    table = torch.randn(VOCAB, DIM, generator=torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(0, VOCAB, (24, 16), generator=g)
    return table[ids] + 0.3 * torch.randn(24, 16, DIM, generator=g), ids


def _accuracy(probe: InversionProbe, states: torch.Tensor, ids: torch.Tensor) -> float:
    guesses = torch.stack([torch.from_numpy(probe.guess_states(s)) for s in states])
    return (guesses == ids).float().mean().item()


def test_cpu_fit_learns_the_states_and_is_reproducible():
    states, ids = _toy()
    probe = InversionProbe.fit(states, ids, CONFIG, VOCAB, device="cpu")
    test_states, test_ids = _toy(seed=1)  # held out
    assert _accuracy(probe, test_states, test_ids) > 0.9
    again = InversionProbe.fit(states, ids, CONFIG, VOCAB, device="cpu")
    for a, b in zip(probe.net.parameters(), again.net.parameters()):
        assert torch.equal(a, b)
    assert all(p.device.type == "cpu" for p in probe.net.parameters())


def test_the_default_device_is_the_training_device():
    states, ids = _toy()
    default = InversionProbe.fit(states, ids, CONFIG, VOCAB)
    chosen = InversionProbe.fit(states, ids, CONFIG, VOCAB, device=training_device())
    for a, b in zip(default.net.parameters(), chosen.net.parameters()):
        assert torch.allclose(a, b, atol=1e-5)  # equal on a CPU; CUDA kernels may differ in the last bits


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA accelerator")
def test_cuda_fit_comes_back_to_the_cpu_and_learns_as_the_cpu_fit_does():
    states, ids = _toy()
    gpu = InversionProbe.fit(states, ids, CONFIG, VOCAB, device="cuda")
    assert all(p.device.type == "cpu" for p in gpu.net.parameters())
    cpu = InversionProbe.fit(states, ids, CONFIG, VOCAB, device="cpu")
    assert abs(_accuracy(gpu, states, ids) - _accuracy(cpu, states, ids)) < 0.05
