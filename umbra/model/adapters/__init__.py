"""Adapters on the client's blocks, chosen per request (docs/ARCHITECTURE.md, "Adapters").

    config.py     typed configs of the four kinds (LoRA, bottleneck, soft prompt, deep prompt), placement
    modules.py    the adapters as nn.Modules of their own parameters; `build_adapter`
    selection.py  `AdapterSet`: the adapters of one request, passed down the forward pass
    files.py      safetensors files with their config, validated on load; export of a LoRA to peft"""

from __future__ import annotations

from typing import TYPE_CHECKING

from umbra.lazy import exports

# Names resolve on first use (PEP 562): the torch-free configs load without the modules.
_HOME = {
    **{n: "config" for n in ("AdapterConfig", "BottleneckConfig", "DeepPromptConfig", "Kind", "LoraConfig",
                             "Placement", "SoftPromptConfig", "SplitShape")},
    **{n: "modules" for n in ("Adapter", "BottleneckAdapter", "DeepPrompt", "LoraAdapter", "SoftPrompt",
                              "build_adapter")},
    **{n: "selection" for n in ("EMPTY", "AdapterSet", "LayerAdapters")},
}
__all__ = sorted(_HOME)

if TYPE_CHECKING:
    from umbra.model.adapters.config import (AdapterConfig, BottleneckConfig, DeepPromptConfig, Kind, LoraConfig,
                                             Placement, SoftPromptConfig, SplitShape)
    from umbra.model.adapters.modules import (Adapter, BottleneckAdapter, DeepPrompt, LoraAdapter, SoftPrompt,
                                              build_adapter)
    from umbra.model.adapters.selection import EMPTY, AdapterSet, LayerAdapters

__getattr__ = exports(__name__, _HOME)
