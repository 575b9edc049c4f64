"""The private local path: bit-exact with the plain split model while W = 0 and nothing is lossy;
keyed prefix noise (same prefix, same noise; another prefix, other noise); the bottleneck's basis;
what trains. The clean residual: bit-exact when the clean table is the sent one, the client-alone
control with its gate closed, and the message to the cloud the same as without it."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from umbra.errors import ConfigError
from umbra.model.loader import load_client, load_middle
from umbra.model.prefix_noise import NoiseStream, batch_normals
from umbra.model.private_path import PrivatePath, random_basis, split_logits
from umbra.model.private_path_config import PrivatePathConfig

SECRET = bytes(range(32))


@pytest.fixture(scope="module")
def parts(fim_qwen2_dir):
    encoder, decoder = load_client(fim_qwen2_dir)
    return encoder, load_middle(fim_qwen2_dir), decoder


def _ids(seed: int, shape=(2, 24)) -> torch.Tensor:
    return torch.randint(5, 500, shape, generator=torch.Generator().manual_seed(seed))


def test_an_untuned_path_is_bit_exactly_the_split_model(parts):
    encoder, middle, decoder = parts
    path = PrivatePath(PrivatePathConfig(enabled=True), encoder.spec.hidden_size, SECRET)
    ids = _ids(0)
    with torch.no_grad():
        plain = split_logits(encoder, middle, decoder, None, ids)
        with_path = split_logits(encoder, middle, decoder, path, ids)
    assert torch.equal(plain, with_path)
    assert torch.count_nonzero(path.local.weight) == 0 and path.noise_for(ids) is None
    with torch.no_grad():  # once W moves, the decoder input moves with it
        path.local.weight.normal_(0, 0.05)
        assert not torch.equal(plain, split_logits(encoder, middle, decoder, path, ids))


def test_noise_is_keyed_by_the_prefix():
    a = batch_normals(SECRET, 16, [[7, 8, 9, 10, 11]])[0]
    again = batch_normals(SECRET, 16, [[7, 8, 9, 10, 11]])[0]
    other = batch_normals(SECRET, 16, [[7, 8, 4, 10, 11]])[0]
    other_key = batch_normals(bytes(32), 16, [[7, 8, 9, 10, 11]])[0]
    assert np.array_equal(a, again)  # a re-sent prefix: exactly the same draw
    assert np.array_equal(a[:2], other[:2])  # positions before the change share their prefix
    assert not np.any(a[2:] == other[2:])  # from the change on, every position is a new draw
    assert not np.any(a == other_key)
    stream = NoiseStream(SECRET, 16)  # chunked, truncated and re-extended: the same numbers
    chunks = [stream.extend_ids([7, 8]), stream.extend_ids([9])]
    stream.truncate(1)
    chunks = [chunks[0][:1], stream.extend_ids([8, 9, 10, 11])]
    assert np.array_equal(np.concatenate(chunks), a)
    big = batch_normals(SECRET, 64, [list(range(3000))])
    assert abs(big.mean()) < 0.01 and abs(big.std() - 1) < 0.01


def test_noise_scale_is_relative_to_the_state(parts):
    encoder = parts[0]
    path = PrivatePath(PrivatePathConfig(enabled=True, noise=0.5), encoder.spec.hidden_size, SECRET)
    ids = _ids(1, (4, 64))
    with torch.no_grad():
        h = encoder(ids, torch.arange(64).expand(4, -1))
        sent = path.send(h, path.noise_for(ids))
        again = path.send(h, path.noise_for(ids))
    ratio = (sent - h).pow(2).mean(-1).sqrt() / h.pow(2).mean(-1).sqrt()
    assert torch.equal(sent, again)
    assert abs(ratio.mean().item() - 0.5) < 0.05
    with pytest.raises(ConfigError, match="needs noise"):
        path.send(h, None)


def test_bottleneck_sends_a_fixed_rank_r_state(parts):
    encoder = parts[0]
    d = encoder.spec.hidden_size
    path = PrivatePath(PrivatePathConfig(enabled=True, rank=8, noise=0.1), d, SECRET)
    q = path.basis
    assert q.shape == (d, 8) and torch.allclose(q.T @ q, torch.eye(8), atol=1e-5)
    assert torch.equal(q, random_basis(SECRET, d, 8)) and not torch.equal(q, random_basis(bytes(32), d, 8))
    ids = _ids(2)
    with torch.no_grad():
        h = encoder(ids, torch.arange(24).expand(2, -1))
        sent = path.send(h, path.noise_for(ids))
    assert path.noise_for(ids).shape == (2, 24, 8)  # noise inside the subspace: projecting cannot remove it
    assert torch.linalg.matrix_rank(sent.reshape(-1, d)).item() == 8
    assert torch.allclose(sent, sent @ q @ q.T, atol=1e-5)


def test_the_local_projection_and_the_encoder_get_gradients(fim_qwen2_dir):
    encoder, decoder = load_client(fim_qwen2_dir)
    middle = load_middle(fim_qwen2_dir)
    encoder.requires_grad_(True)
    path = PrivatePath(PrivatePathConfig(enabled=True, noise=0.3, rank=16), encoder.spec.hidden_size, SECRET)
    ids = _ids(3)
    logits = split_logits(encoder, middle, decoder, path, ids)
    logits.float().logsumexp(-1).mean().backward()
    assert path.local.weight.grad is not None and path.local.weight.grad.abs().sum() > 0
    assert encoder.stack.layers[0].mlp.up_proj.weight.grad.abs().sum() > 0
    assert not any(n == "basis" for n, _ in path.named_parameters())  # fixed, not trained
    assert "basis" in path.state_dict() and not any("key" in k for k in path.state_dict())


def test_config_is_validated():
    with pytest.raises(ConfigError, match="needs the private local path"):
        PrivatePathConfig(noise=0.5).validate()
    with pytest.raises(ConfigError, match="exceeds the hidden size"):
        PrivatePathConfig(enabled=True, rank=65).validate(64)
    with pytest.raises(ConfigError, match="finite number"):
        PrivatePathConfig(enabled=True, noise=float("nan")).validate()
    with pytest.raises(ConfigError, match="malformed"):
        PrivatePathConfig.from_dict({"enabled": True, "scale": 1})
    assert PrivatePathConfig.from_dict(None) == PrivatePathConfig()
    with pytest.raises(ConfigError, match="at least 16 bytes"):
        PrivatePath(PrivatePathConfig(enabled=True), 64, b"short")


# -- the clean residual -------------------------------------------------------------------------
def _clean_path(encoder, table=None, **kw) -> PrivatePath:
    config = PrivatePathConfig(enabled=True, residual="clean", **kw)
    table = encoder.embed_tokens.weight if table is None else table
    return PrivatePath(config, encoder.spec.hidden_size, SECRET, clean_table=table)


def test_a_config_describes_itself_in_words():
    assert PrivatePathConfig().describe() == "off"
    assert PrivatePathConfig(enabled=True).describe() == "local path y + W·h, lossless send"
    assert PrivatePathConfig(enabled=True, noise=1.0, rank=8).describe() == "local path y + W·h, keyed noise s = 1 + rank 8"
    assert (PrivatePathConfig(enabled=True, noise=4.0, residual="clean", gate="scalar").describe()
            == "clean residual, keyed noise s = 4, one gate")


def test_a_lossless_clean_residual_over_the_sent_table_is_bit_exactly_the_split_model(parts):
    # no noise, full rank, clean table = the table that is sent (ε = ∞): h_c = sent, and g = 1
    encoder, middle, decoder = parts
    path = _clean_path(encoder)
    ids = _ids(4)
    with torch.no_grad():
        plain = split_logits(encoder, middle, decoder, None, ids)
        assert torch.equal(plain, split_logits(encoder, middle, decoder, path, ids))
        path.gate.fill_(0.5)  # a moved gate changes the decoder input
        assert not torch.equal(plain, split_logits(encoder, middle, decoder, path, ids))


def test_a_closed_gate_is_the_client_blocks_alone(parts):
    # g = 0: decoder(encoder over the clean table), whatever was sent and came back
    encoder, middle, decoder = parts
    noisy = encoder.embed_tokens.weight + 0.3 * torch.randn(encoder.embed_tokens.weight.shape,
                                                            generator=torch.Generator().manual_seed(1))
    clean = encoder.embed_tokens.weight.detach().clone()
    sender = copy.deepcopy(encoder)  # the same blocks over a randomized (INDVocab-like) table
    with torch.no_grad():
        sender.embed_tokens.weight.copy_(noisy)
    path = _clean_path(sender, clean, noise=1.0, rank=8)
    ids = _ids(5)
    pos = torch.arange(ids.shape[1]).expand(ids.shape[0], -1)
    with torch.no_grad():
        path.gate.zero_()
        logits = split_logits(sender, middle, decoder, path, ids)
        alone = decoder(encoder(ids, pos), pos)
    assert torch.allclose(logits, alone, atol=1e-5)


def test_what_is_sent_does_not_depend_on_the_clean_table(parts):
    encoder, middle, decoder = parts
    ids = _ids(6)
    pos = torch.arange(ids.shape[1]).expand(ids.shape[0], -1)
    seen = []

    def recording(x, positions):
        seen.append(x.clone())
        return middle(x, positions)

    other = torch.randn(encoder.embed_tokens.weight.shape, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        for table in (encoder.embed_tokens.weight, other):
            split_logits(encoder, recording, decoder, _clean_path(encoder, table, noise=0.5), ids)
        local = PrivatePath(PrivatePathConfig(enabled=True, noise=0.5), encoder.spec.hidden_size, SECRET)
        split_logits(encoder, recording, decoder, local, ids)
        h = encoder(ids, pos)
    assert torch.equal(seen[0], seen[1]) and torch.equal(seen[0], seen[2])  # clean or local: the same message
    assert torch.equal(seen[0], local.send(h, local.noise_for(ids)))


def test_the_clean_residual_trains_the_gate_and_keeps_its_table_out_of_the_state(parts):
    encoder, middle, decoder = parts
    path = _clean_path(encoder, noise=0.5)
    assert path.local is None and path.gate.shape == (encoder.spec.hidden_size,)
    assert set(path.state_dict()) == {"gate"}  # the clean table (private row order) is never saved
    assert [n for n, _ in path.named_parameters()] == ["gate"]
    assert _clean_path(encoder, gate="scalar").gate.shape == (1,)
    ids = _ids(7)
    split_logits(encoder, middle, decoder, path, ids).float().logsumexp(-1).mean().backward()
    assert path.gate.grad is not None and path.gate.grad.abs().sum() > 0
    with pytest.raises(ConfigError, match="needs the public embedding table"):
        PrivatePath(PrivatePathConfig(enabled=True, residual="clean"), encoder.spec.hidden_size, SECRET)
    with pytest.raises(ConfigError, match="only the clean residual"):
        PrivatePath(PrivatePathConfig(enabled=True), encoder.spec.hidden_size, SECRET,
                    clean_table=encoder.embed_tokens.weight)


def test_clean_residual_config_and_its_record():
    with pytest.raises(ConfigError, match="needs the private local path"):
        PrivatePathConfig(residual="clean").validate()
    with pytest.raises(ConfigError, match="residual must be one of"):
        PrivatePathConfig(enabled=True, residual="other").validate()
    with pytest.raises(ConfigError, match="setting of the clean residual"):
        PrivatePathConfig(enabled=True, gate="scalar").validate()
    # a path configured before the clean residual keeps its record (and so its privacy-mode key)
    assert PrivatePathConfig(enabled=True, noise=0.5).to_dict() == {"enabled": True, "noise": 0.5, "rank": None}
    clean = PrivatePathConfig(enabled=True, residual="clean", gate="scalar", noise=1.0)
    assert clean.to_dict()["residual"] == "clean" and PrivatePathConfig.from_dict(clean.to_dict()) == clean
