"""What the cloud checks before it binds its port: everything a start can get wrong is a one-line
ConfigError here, before any client can connect.

A model directory without config.json; a split leaving no middle block; a --device this machine
lacks (cuda with no CUDA); a dtype that device cannot run (umbra/model/device.py); a shard the
middle blocks need that is missing, or a middle tensor whose shape disagrees with config.json (shard
headers only: nothing is read). `umbra cloud serve` runs it before binding; the lifespan runs it
again (an app built by `create_app` alone) and then loads."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from server.settings import CloudSettings
from umbra.model.device import check_dtype, resolve_device
from umbra.model.loader import Checkpoint, check_part
from umbra.model.parts import SplitPlan
from umbra.model.spec import ModelSpec, load_spec


@dataclass(frozen=True)
class Preflight:
    spec: ModelSpec
    plan: SplitPlan
    device: torch.device
    dtype: torch.dtype
    checkpoint: Checkpoint
    middle_bytes: int  # the middle blocks' weights in `dtype`

    @property
    def middle_layers(self) -> int:
        first, last = self.plan.middle_range(self.spec.num_layers)
        return last - first


def preflight(settings: CloudSettings) -> Preflight:
    """Check `settings` against this machine and the model directory (ConfigError / ModelLoadError)."""
    settings.check()
    spec = load_spec(settings.model_dir)
    plan_args = settings.plan_args()
    plan = SplitPlan(*plan_args) if plan_args else SplitPlan.default(spec.num_layers)
    plan.validate(spec.num_layers)
    device = resolve_device(settings.device)
    dtype = settings.torch_dtype
    check_dtype(device, dtype)
    ckpt = Checkpoint(settings.model_dir)
    elements = check_part(settings.model_dir, "middle", plan, spec, ckpt)
    return Preflight(spec, plan, device, dtype, ckpt, elements * torch.empty((), dtype=dtype).element_size())
