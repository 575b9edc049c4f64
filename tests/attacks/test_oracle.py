"""The oracle probe (umbra/attacks/oracle.py, AttackSuite.oracle) and the per-layer probes under it
(umbra/attacks/layer_probes.py), on a tiny model: trained on the REAL client's own states of
held-out files, it reads an undefended client far above the frequency baseline — and, unlike any
attacker without the client's secrets, it also reads an untuned INDVocab ε = 1 client (its table
is drawn once, so equal tokens give equal states): the bound is not the attacks' bound. One score
per layer (split + every middle block); held-out blocks that are attacked prompts are refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from attack_world import PROBE, build_world, prompts_of

from umbra.attack_grid.clients import Defence
from umbra.attacks.layer_probes import SPLIT, layer_names, layer_states, per_layer
from umbra.attacks.oracle import check_disjoint, oracle_attacks, train_oracle, without_attacked
from umbra.attacks.suite import AttackSuite, SuiteConfig
from umbra.errors import ConfigError


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("oracle")
    public, sample, prompts, held_out = build_world(root)
    suite = AttackSuite.build(public, SuiteConfig(corpus=sample, probe=PROBE, attacks=("baseline",)))
    return public, suite, prompts, held_out


def _scores(suite, client, sequences, held_out):
    extra = suite.oracle(client.encoder, client.permutation, held_out, attacked=sequences)
    return suite.run(sequences, extra=extra).scores


def test_oracle_reads_an_undefended_client_at_every_layer(world):
    public, suite, prompts, held_out = world
    client, seqs = prompts_of(public, Defence(), prompts)
    scores = _scores(suite, client, seqs, held_out)
    base = scores["baseline"].recovery
    layers = per_layer(scores, "oracle")
    assert list(layers) == layer_names(public.middle) == [SPLIT, "layer1", "layer2", "layer3"]
    assert layers[SPLIT] > base + 0.3, (layers, base)
    assert scores["oracle"].recovery > base + 0.3


def test_oracle_reads_an_untuned_indvocab_client_that_public_probes_cannot(world):
    public, suite, prompts, held_out = world
    client, seqs = prompts_of(public, Defence(indvocab_epsilon=1.0, ltokenizer=True), prompts)
    # the split layer's probe alone, the one read here: train_oracle with the suite's probe settings
    # (AttackSuite.oracle trains it at every layer: test_oracle_reads_an_undefended_client_at_every_layer)
    probes = train_oracle(client.encoder, client.permutation, held_out, public.middle,
                          min(public.tokenizer.size, public.vocab_size), suite.config.probe, layers=(SPLIT,),
                          attacked=seqs)
    assert probes.layers == [SPLIT]
    scores = suite.run(seqs, extra=oracle_attacks(probes, public.middle)).scores
    base = scores["baseline"].recovery
    assert per_layer(scores, "oracle")[SPLIT] > base + 0.2, (scores, base)


def test_layer_states_match_the_middle_and_held_out_prompts_are_refused(world):
    public, suite, prompts, held_out = world
    client, seqs = prompts_of(public, Defence(), prompts)
    hidden = torch.stack([s.hidden for s in seqs[:3]])
    states = layer_states(hidden, public.middle)
    pos = torch.arange(hidden.shape[1])[None].expand(3, -1)
    with torch.no_grad():
        last = public.middle(hidden, pos)
    torch.testing.assert_close(states[layer_names(public.middle)[-1]], last)
    torch.testing.assert_close(states[SPLIT], hidden)
    with pytest.raises(ConfigError, match="attacked prompt"):
        suite.oracle(client.encoder, client.permutation, np.concatenate([held_out, prompts[:1]]), attacked=seqs)


def test_held_out_blocks_repeating_an_attacked_prompt_are_dropped_not_trained_on(world):
    """A corpus whose splits repeat a file verbatim: the grid drops those blocks (without_attacked)
    and trains on the rest, which check_disjoint then accepts."""
    public, suite, prompts, held_out = world
    _, seqs = prompts_of(public, Defence(), prompts)
    mixed = np.concatenate([held_out[:2], prompts[:2], held_out[2:4]])
    kept, dropped = without_attacked(mixed, seqs)
    assert dropped == 2 and np.array_equal(kept, np.concatenate([held_out[:2], held_out[2:4]]))
    check_disjoint(kept, seqs)
    with pytest.raises(ConfigError, match="attacked prompt"):
        check_disjoint(mixed, seqs)
