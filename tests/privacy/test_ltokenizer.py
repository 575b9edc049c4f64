"""LTokenizer: π is a uniform permutation; permuted model rows give the public logits permuted;
the tokenizer wrapper hands out only private ids."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest
import torch
from scipy import stats
from tiny_models import build_tiny_model_dir

from umbra.engine.tokenizer import ClientTokenizer
from umbra.errors import ValidationError
from umbra.model.loader import load_client, load_middle
from umbra.privacy.ltokenizer import (
    Permutation,
    PrivateTokenizer,
    private_rows,
    public_rows,
    to_private_order_,
    to_public_order_,
)


@pytest.fixture(scope="module", params=["qwen2-tied", "llama"])
def model_dir(request, tmp_path_factory):
    d = tmp_path_factory.mktemp(f"lt-{request.param}")
    build_tiny_model_dir(d, family=request.param)
    return d


def test_random_permutation_is_a_permutation_and_round_trips():
    perm = Permutation.random(1000)
    assert sorted(perm.forward.tolist()) == list(range(1000))
    ids = np.arange(1000)
    assert np.array_equal(perm.to_public(perm.to_private(ids)), ids)
    assert np.array_equal(perm.forward[perm.inverse], ids)
    assert Permutation.from_bytes(perm.to_bytes()) == perm
    assert perm.to_private(7) == int(perm.forward[7])
    assert perm.to_public(perm.to_private([1, 2, 3])) == [1, 2, 3]
    t = torch.tensor([[5, 6], [7, 8]])
    assert torch.equal(perm.to_public(perm.to_private(t)), t)
    assert "Permutation(size=1000)" == repr(perm)  # never prints π


def test_permutations_differ_across_draws():
    draws = {tuple(Permutation.random(512).forward.tolist()) for _ in range(5)}
    assert len(draws) == 5


def test_permutation_is_uniform_on_a_tiny_vocabulary():
    counts = Counter(tuple(Permutation.random(3).forward.tolist()) for _ in range(6000))
    assert set(counts) == set(itertools.permutations(range(3)))
    assert stats.chisquare(list(counts.values())).pvalue > 1e-4


@pytest.mark.parametrize("bad", [[0, 0, 1], [0, 3, 1], [-1, 0, 1], []])
def test_rejects_non_permutations(bad):
    with pytest.raises(ValidationError):
        Permutation(np.array(bad, dtype=np.int64))


def test_rejects_out_of_range_ids():
    perm = Permutation.random(10)
    for bad in (10, [3, 11], np.array([-1]), torch.tensor([12])):
        with pytest.raises(ValidationError):
            perm.to_private(bad)


def test_from_bytes_rejects_garbage():
    with pytest.raises(ValidationError):
        Permutation.from_bytes(b"nonsense")
    blob = Permutation.random(8).to_bytes()
    with pytest.raises(ValidationError):
        Permutation.from_bytes(blob[:-4])


@torch.no_grad()
def test_private_ids_give_public_logits_permuted(model_dir):
    enc, dec = load_client(model_dir)
    mid = load_middle(model_dir)
    ids = torch.randint(0, enc.spec.vocab_size, (2, 9), generator=torch.Generator().manual_seed(0))
    pos = torch.arange(9).expand(2, 9)
    public_logits = dec(mid(enc(ids, pos), pos), pos)

    perm = Permutation.random(enc.spec.vocab_size)
    penc, pdec = load_client(model_dir)
    emb_param = penc.embed_tokens.weight
    to_private_order_(penc, pdec, perm)
    assert penc.embed_tokens.weight is emb_param  # same Parameter object, reordered in place
    private_logits = pdec(mid(penc(perm.to_private(ids), pos), pos), pos)
    assert torch.allclose(private_logits, public_logits[..., torch.tensor(perm.inverse)], atol=1e-5, rtol=0)
    # sampling in private space, π⁻¹ back: the same tokens as the public model picks
    assert torch.equal(perm.to_public(private_logits.argmax(-1)), public_logits.argmax(-1))

    to_public_order_(penc, pdec, perm)
    assert torch.equal(penc.embed_tokens.weight, enc.embed_tokens.weight)
    assert torch.equal(pdec.lm_head.weight, dec.lm_head.weight)


def test_row_helpers_are_inverse():
    perm = Permutation.random(50)
    w = torch.randn(50, 4)
    assert torch.equal(public_rows(private_rows(w, perm), perm), w)
    assert torch.equal(private_rows(w, perm)[perm.to_private(7)], w[7])
    with pytest.raises(ValidationError):
        private_rows(torch.randn(49, 4), perm)


def test_private_tokenizer_wraps_the_client_tokenizer(model_dir):
    public = ClientTokenizer.from_dir(model_dir)
    perm = Permutation.random(512)
    tok = PrivateTokenizer(public, perm)
    text = "def add(a, b):\n    return a + b\n"
    pub_ids = public.encode(text)
    priv_ids = tok.encode(text)
    assert priv_ids == [int(perm.forward[i]) for i in pub_ids]
    assert tok.decode(priv_ids) == text
    ids, offsets = tok.encode_with_offsets(text)
    assert ids == priv_ids and offsets == public.encode_with_offsets(text)[1]
    assert tok.token_id("<fim_prefix>") == perm.to_private(public.token_id("<fim_prefix>"))
    assert tok.token_id("no-such-token") is None
    assert tok.eos_ids == frozenset(perm.to_private(sorted(public.eos_ids)))
    assert tok.special_ids == frozenset(perm.to_private(sorted(public.special_ids)))
    assert tok.bos_id is None and public.bos_id is None
    assert tok.size == public.size and tok.has_tokens("<fim_middle>")
    with pytest.raises(AttributeError):
        tok._tok  # noqa: B018  (private attributes are never forwarded)
    with pytest.raises(AttributeError, match="could carry public ids"):
        tok.from_dir  # noqa: B018


def test_private_tokenizer_wraps_any_minimal_tokenizer():
    class Chars:  # encode/decode + special ids, nothing else
        eos_token_id = 3
        pad_token_id = None
        all_special_ids = [0, 3]

        def encode(self, text):
            return [ord(c) for c in text]

        def decode(self, ids):
            return "".join(map(chr, ids))

    perm = Permutation.random(256)
    tok = PrivateTokenizer(Chars(), perm)
    assert tok.decode(tok.encode("hello")) == "hello"
    assert tok.encode("A") == [int(perm.forward[65])]
    assert tok.eos_token_id == perm.to_private(3) and tok.pad_token_id is None
    assert tok.all_special_ids == perm.to_private([0, 3])
    with pytest.raises(ValidationError):
        PrivateTokenizer(object(), perm)


def test_split_point_quantities_are_invariant_to_pi(model_dir):
    """What π does NOT hide: with rows and labels permuted consistently, the hidden states sent to
    the cloud and the gradient returned at the middle's output are exactly the public model's
    (docs/privacy/ltokenizer.md). π only protects token ids themselves."""
    enc, dec = load_client(model_dir)
    mid = load_middle(model_dir)
    penc, pdec = load_client(model_dir)
    perm = Permutation.random(enc.spec.vocab_size)
    to_private_order_(penc, pdec, perm)
    ids = torch.randint(0, enc.spec.vocab_size, (1, 8), generator=torch.Generator().manual_seed(1))
    pos = torch.arange(8).unsqueeze(0)
    labels = torch.roll(ids, -1, dims=1)

    def split_view(e, d, x_ids, y):
        with torch.no_grad():
            sent = e(x_ids, pos)  # what crosses the wire forward
            back = mid(sent, pos).requires_grad_(True)
        loss = torch.nn.functional.cross_entropy(d(back, pos)[0], y[0])
        loss.backward()
        return sent, back.grad  # the gradient the client sends to the cloud

    sent_pub, grad_pub = split_view(enc, dec.requires_grad_(False), ids, labels)
    sent_priv, grad_priv = split_view(penc, pdec.requires_grad_(False), perm.to_private(ids), perm.to_private(labels))
    assert torch.equal(sent_priv, sent_pub)
    assert torch.allclose(grad_priv, grad_pub, atol=1e-7, rtol=1e-5)
