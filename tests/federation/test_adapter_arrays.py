"""The secure LoRA <-> named arrays: an exact round trip, Δw^0 with B = 0, and arrays that do not
fit the model's LoRA refused with the first difference."""

from __future__ import annotations

import numpy as np
import pytest

from umbra.errors import ConfigError
from umbra.federation.adapter_arrays import adapter_to_arrays, arrays_to_adapter, initial_arrays
from umbra.tuning.adapter_config import AdapterTrainConfig

CONFIG = AdapterTrainConfig(rank=2, seed=0)


@pytest.fixture(scope="module")
def model(fim_qwen2_dir):
    from umbra.engine import ClientModel

    return ClientModel.load(fim_qwen2_dir)


def test_round_trip_is_exact_and_the_start_adds_nothing(model):
    arrays = initial_arrays(model, CONFIG)
    assert arrays and all(k.endswith((".a", ".b")) for k in arrays)
    assert all(not v.any() for k, v in arrays.items() if k.endswith(".b"))  # ΔW = B·A = 0 at the start
    rng = np.random.default_rng(0)
    moved = {k: rng.standard_normal(v.shape).astype(np.float32) for k, v in arrays.items()}
    back = adapter_to_arrays(arrays_to_adapter(moved, model, CONFIG, "secure"))
    assert all(np.array_equal(back[k], moved[k]) and back[k].dtype == np.float32 for k in moved)
    assert initial_arrays(model, CONFIG).keys() == arrays.keys()


def test_arrays_that_do_not_fit_are_refused(model):
    arrays = initial_arrays(model, CONFIG)
    name = next(iter(arrays))
    with pytest.raises(ConfigError, match="has shape"):
        arrays_to_adapter({**arrays, name: np.zeros((5, 5), np.float32)}, model, CONFIG, "s")
    with pytest.raises(ConfigError, match="unexpected"):
        arrays_to_adapter({**arrays, "layers.0.q.a": arrays[name]}, model, CONFIG, "s")
    with pytest.raises(ConfigError, match="finite"):
        arrays_to_adapter({**arrays, name: np.full_like(arrays[name], np.inf)}, model, CONFIG, "s")
