"""Helpers of the adapter tests: adapters whose outputs are not zero (as after training), a few
real training steps of an adapter on next-token loss through the split model, and a bundle's
user without its access keys for a while (what the cloud sees must not depend on a held key)."""

from __future__ import annotations

import contextlib

import torch

from keys.access_keys import delete_key, held_key_ids, load_key, store_key

OUTPUT_WEIGHTS = (".b", ".up", ".gate")


def perturb(adapter, seed: int = 0, std: float = 0.2):
    """Give the adapter non-zero output weights (and a new revision), as training would."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in adapter.named_parameters():
            if name.endswith(OUTPUT_WEIGHTS) or name == "prompt":
                p.copy_(torch.randn(p.shape, generator=gen) * std)
    adapter.touch()
    return adapter


def perturbed_adapter(model, name: str, config, seed: int, std: float = 0.5):
    """A new adapter of `config` for `model`'s shape and split, with non-zero outputs (perturb)."""
    from umbra.model.adapters import build_adapter

    return perturb(build_adapter(name, config, model.spec, model.plan.shape(model.spec.num_layers)), seed=seed, std=std)


def train_steps(adapter, encoder, middle, decoder, ids: torch.Tensor, steps: int = 5, lr: float = 0.05):
    """`steps` Adam steps of the adapter alone on next-token loss of ids [B,T] (middle in-process)."""
    from umbra.model.adapters import AdapterSet

    adapter.requires_grad_(True)
    opt = torch.optim.Adam(adapter.parameters(), lr=lr)
    pos = torch.arange(ids.shape[1])[None].expand(ids.shape[0], -1)
    losses = []
    for _ in range(steps):
        aset = AdapterSet([adapter], frozen=False)
        h = encoder(ids, pos, adapters=aset)
        h = middle(h, pos)
        logits = decoder(h, pos, adapters=aset)
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    adapter.requires_grad_(False)
    adapter.touch()
    return losses


@contextlib.contextmanager
def keys_removed(model, store):
    """This user holds no access key of `model`'s bundle for the duration (the keys are put back
    after, and the model's access reloaded both times)."""
    bundle_id = model.bundle.manifest.bundle_id
    held = [load_key(store, bundle_id, k) for k in held_key_ids(store, bundle_id)]
    for key in held:
        delete_key(store, bundle_id, key.key_id)
    model.access.reload_keys()
    try:
        yield
    finally:
        for key in held:
            store_key(store, key)
        model.access.reload_keys()
