"""Volume traffic (umbra/attacks/volume.py): N client blocks as the ObservedSequences the cloud
would hold — the client's encoder outputs of its private ids, the truth attached — at k× the
grid's volume, and decipherment over them as a named attack of the suite."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from attack_world import PROBE, build_world, recorded

from umbra.attack_grid.clients import Defence, build_client
from umbra.attacks.suite import DECIPHER, AttackSuite, SuiteConfig
from umbra.attacks.volume import times, volume_traffic
from umbra.errors import ConfigError


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return build_world(tmp_path_factory.mktemp("volume"))


def test_volume_traffic_is_what_the_cloud_records(world):
    public, sample, prompts, _ = world
    client = build_client(public.dir, Defence(indvocab_epsilon=13.0, ltokenizer=True), public.plan, seed=3)
    seqs = volume_traffic(client.encoder, client.permutation, prompts, batch=5)
    cloud = recorded(public, client, prompts)  # through a RecordingMiddle, as the engine sends them
    assert len(seqs) == len(cloud) == len(prompts)
    for mine, theirs, row in zip(seqs, cloud, prompts):
        torch.testing.assert_close(mine.hidden, theirs.hidden)
        assert np.array_equal(mine.truth, row) and mine.scored.all()
    half = volume_traffic(client.encoder, client.permutation, prompts[:2], dtype=torch.float16)
    assert half[0].hidden.dtype == torch.float16


def test_times_and_decipherment_in_the_suite(world):
    public, sample, prompts, _ = world
    assert times(prompts, 1, base=4).shape == (4, prompts.shape[1])
    assert times(prompts, 4, base=4).shape[0] == 16
    with pytest.raises(ConfigError):
        times(prompts, 10, base=4)
    client = build_client(public.dir, Defence(), public.plan)
    seqs = volume_traffic(client.encoder, client.permutation, prompts)
    suite = AttackSuite.build(public, SuiteConfig(corpus=sample, probe=PROBE, attacks=("baseline",)))
    scores = suite.run(seqs, extra={DECIPHER: suite.decipherment()}).scores
    assert scores[DECIPHER].tokens_scored == prompts.size
