"""train_organization with the federation's global secure adapter (eqs. 6 and 8 across the
federation): both fused adapters hold the global's factors beside the organization's own
(rank concatenation, global first), with the weights fitted on the query set."""

from __future__ import annotations

import asyncio

import numpy as np
import torch

from tiny_models import CODE_SNIPPETS
from umbra.federation.adapter_arrays import initial_arrays, load_global
from umbra.federation.record import save_arrays
from umbra.middle.local import LocalMiddle
from umbra.scrub import ScrubConfig, Scrubber
from umbra.tuning.adapter_config import AdapterTrainConfig
from umbra.tuning.dual_adapters import DualAdapterConfig
from umbra.tuning.fusion import FusionConfig
from umbra.tuning.securegate import OrgTrainConfig, train_organization

LOCAL = AdapterTrainConfig(rank=2, lr=3e-3, epochs=1, block_len=64, batch_size=4, fim_rate=0.0, seed=0)


def test_the_federations_global_adapter_is_fused_into_both(model, middle_blocks, tmp_path):
    rng = np.random.default_rng(0)
    arrays = {k: (v if k.endswith(".a") else rng.standard_normal(v.shape).astype(np.float32) * 0.01)
              for k, v in initial_arrays(model, AdapterTrainConfig(rank=3, seed=7)).items()}
    save_arrays(tmp_path / "global.npz", arrays)
    global_ = load_global(tmp_path / "global.npz", model)
    assert global_.config.rank == 3
    files = [(f"svc/m{i}.py", f'API_KEY = "sk_live_{i}a8f3Kq9ZxLm2Vb7Rt4Np6Wc"\n' + CODE_SNIPPETS[i % len(CODE_SNIPPETS)])
             for i in range(8)]
    config = OrgTrainConfig(adapters=DualAdapterConfig(LOCAL, LOCAL), fusion=FusionConfig(max_iters=3, block_len=64))
    result = asyncio.run(train_organization(model, LocalMiddle(middle_blocks), files, Scrubber(ScrubConfig()),
                                            config, global_adapter=global_))
    assert result.report["global"] == "the federation's global secure adapter"
    for fused in (result.secure, result.revealing):
        assert fused.config.rank == 3 + 2
        for block, per in fused.layers.items():
            for target, pair in per.items():
                assert torch.equal(pair.a[:3], global_.layers[block][target].a)  # the global's A, first
    # without it, the organization's own secure adapter stands in (rank 2 + 2)
    alone = asyncio.run(train_organization(model, LocalMiddle(middle_blocks), files, Scrubber(ScrubConfig()), config))
    assert alone.secure.config.rank == 4 and "no federation" in alone.report["global"]
