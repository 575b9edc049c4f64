"""Per-layer probes (umbra/attacks/layer_probes.py): trained on any client's states, one per
layer, cached and reloaded only with the same settings, the layer to read picked by the
attacker's own validation; a padded sequence is read in the context the cloud holds; a stopped
run resumes from its per-layer checkpoint with the probes an uninterrupted run gives."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from attack_world import PROBE, build_world

from umbra.attacks.client_states import client_states
from umbra.attacks.layer_probes import SPLIT, LayerAttack, LayerProbes, layer_names
from umbra.attacks.probe import InversionProbe
from umbra.attacks.transcript import ObservedSequence
from umbra.errors import ConfigError


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    public, sample, prompts, held = build_world(tmp_path_factory.mktemp("layers"))
    states_of = lambda b: client_states(public.encoder, None, b)  # noqa: E731
    vocab = min(public.tokenizer.size, public.vocab_size)
    probes = LayerProbes.train(states_of, held, public.middle, vocab, PROBE, layers=(SPLIT, "layer2"))
    return public, prompts, probes, states_of, vocab, held


def test_cache_round_trip_and_settings_key(trained, tmp_path):
    public, prompts, probes, _, _, _ = trained
    probes.save(tmp_path / "p")
    loaded = LayerProbes.load(tmp_path / "p", PROBE)
    assert loaded.layers == [SPLIT, "layer2"] and loaded.validation == probes.validation
    assert LayerProbes.load(tmp_path / "p", PROBE.__class__(hidden=64)) is None
    seq = ObservedSequence(public.states(torch.from_numpy(prompts[:1]))[0], torch.arange(prompts.shape[1]),
                           np.ones(prompts.shape[1], bool), np.ones(prompts.shape[1], bool))
    for layer in (SPLIT, "layer2"):
        a = LayerAttack("x", probes, public.middle, layer=layer).run([seq])[0]
        b = LayerAttack("x", loaded, public.middle, layer=layer).run([seq])[0]
        assert np.array_equal(a, b)


def test_best_layer_is_the_attackers_own_validation_choice(trained):
    _, _, probes, _, _, _ = trained
    assert probes.best == max(probes.validation, key=probes.validation.get)
    fixed = LayerProbes(probes.probes, {SPLIT: 0.2, "layer2": 0.7})
    assert fixed.best == "layer2"


def test_padding_and_unknown_layers(trained):
    public, prompts, probes, states_of, vocab, _ = trained
    t = prompts.shape[1]
    hidden = states_of(prompts[:1])[0]
    real = np.ones(t, bool)
    real[:3] = False  # left padding, as a batched prefill pads
    seq = ObservedSequence(hidden, torch.arange(t), np.ones(t, bool), real)
    guess = LayerAttack("x", probes, public.middle, layer="layer2").run([seq])[0]
    assert guess.shape == (t,)
    with pytest.raises(ConfigError, match="unknown layers"):
        LayerProbes.train(states_of, prompts, public.middle, vocab, PROBE, layers=("layer9",))
    assert layer_names(public.middle)[0] == SPLIT


def test_a_stopped_run_resumes_at_the_next_layer_with_the_same_probes(trained, tmp_path, monkeypatch):
    public, _, probes, states_of, vocab, held = trained
    fit, calls = InversionProbe.fit, []

    def stop_on_the_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt  # the grid paused or killed part-way
        return fit(*args, **kwargs)

    monkeypatch.setattr(InversionProbe, "fit", stop_on_the_second)
    with pytest.raises(KeyboardInterrupt):
        LayerProbes.train(states_of, held, public.middle, vocab, PROBE, layers=(SPLIT, "layer2"),
                          checkpoint=tmp_path / "ck")
    calls.clear()
    monkeypatch.setattr(InversionProbe, "fit", lambda *a, **k: (calls.append(1), fit(*a, **k))[1])
    resumed = LayerProbes.train(states_of, held, public.middle, vocab, PROBE, layers=(SPLIT, "layer2"),
                                checkpoint=tmp_path / "ck")
    assert len(calls) == 1  # only layer2 was trained again
    assert resumed.validation == probes.validation
    for name in (SPLIT, "layer2"):
        for a, b in zip(resumed.probes[name].net.parameters(), probes.probes[name].net.parameters()):
            assert torch.equal(a, b)
    # another client's states (or other labels, or settings) never reuse a stored probe
    calls.clear()
    other = lambda b: 2.0 * states_of(b)  # noqa: E731
    LayerProbes.train(other, held, public.middle, vocab, PROBE, layers=(SPLIT,), checkpoint=tmp_path / "ck")
    assert len(calls) == 1
