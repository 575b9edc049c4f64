"""The secure adapter as named numpy arrays, the only thing that travels in the federation:

    arrays = adapter_to_arrays(adapter)                      # {"layers.6.q.a": ndarray, ...}
    adapter = arrays_to_adapter(arrays, model, train_config, "secure")
    arrays0 = initial_arrays(model, train_config)            # Δw^0: a fresh LoRA (B = 0: ΔW = 0)
    global_ = load_global(path, model)                       # the federation's Δw^T, for fusion

Names are the LoRA module's own state-dict keys (`layers.<block>.<target>.a|b`), float32. A set of
arrays that does not fit the model's LoRA of that config (a missing or unexpected name, a wrong
shape) is a ConfigError naming the first difference."""

from __future__ import annotations

import numpy as np
import torch

from umbra.errors import ConfigError
from umbra.model.adapters.modules import LoraAdapter, build_adapter
from umbra.tuning.adapter_config import AdapterTrainConfig


def adapter_to_arrays(adapter: LoraAdapter) -> dict[str, np.ndarray]:
    if not isinstance(adapter, LoraAdapter):
        raise ConfigError(f"the federation shares LoRA adapters, not {type(adapter).__name__}")
    return {k: v.detach().to(torch.float32).cpu().numpy().copy() for k, v in adapter.state_dict().items()}


def fresh_adapter(model, config: AdapterTrainConfig, name: str) -> LoraAdapter:
    """A new decoder LoRA of `config` for `model` (A seeded by config.seed, B zero)."""
    return build_adapter(name, config.validate().lora(), model.spec, model.plan.shape(model.spec.num_layers))


def initial_arrays(model, config: AdapterTrainConfig) -> dict[str, np.ndarray]:
    """Δw^0, the global secure adapter before round 1."""
    return adapter_to_arrays(fresh_adapter(model, config, "secure"))


def arrays_to_adapter(arrays, model, config: AdapterTrainConfig, name: str) -> LoraAdapter:
    """The LoRA of `config` for `model` holding `arrays` (copied)."""
    adapter = fresh_adapter(model, config, name)
    expected = adapter.state_dict()
    missing, extra = sorted(set(expected) - set(arrays)), sorted(set(arrays) - set(expected))
    if missing or extra:
        raise ConfigError(f"the adapter arrays do not fit this model's LoRA (rank {config.rank}): missing "
                          f"{missing[:3]}, unexpected {extra[:3]}")
    state = {}
    for key, ref in expected.items():
        a = np.asarray(arrays[key])
        if tuple(a.shape) != tuple(ref.shape):
            raise ConfigError(f"the adapter array {key!r} has shape {tuple(a.shape)}, this model's LoRA "
                              f"(rank {config.rank}) needs {tuple(ref.shape)}: another base model or rank?")
        if a.dtype.kind != "f" or not np.isfinite(a).all():
            raise ConfigError(f"the adapter array {key!r} is not a finite floating-point array")
        state[key] = torch.from_numpy(a.astype(np.float32, copy=True))
    adapter.load_state_dict(state, strict=True)
    return adapter.requires_grad_(False)


def load_global(path, model, name: str = "global-secure") -> LoraAdapter:
    """The federation's global secure adapter from its .npz (`umbra federation serve --out`,
    `join --global-out`), its rank read from the arrays (the LoRA's default scale, 4, as trained)."""
    from umbra.federation.record import load_arrays

    arrays, _ = load_arrays(path)
    ranks = {a.shape[0] for k, a in arrays.items() if k.endswith(".a") and a.ndim == 2}
    if len(ranks) != 1:
        raise ConfigError(f"{path} is not one LoRA's arrays (ranks found: {sorted(ranks)})")
    return arrays_to_adapter(arrays, model, AdapterTrainConfig(rank=ranks.pop()), name)
