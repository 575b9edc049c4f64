"""Lazy package exports (PEP 562): a package names what it exports and the submodule each lives
in, and a name's submodule is imported on its first use. Importing a torch-free submodule (a
config, for a CLI's --help defaults) then does not import torch and the model code with it."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable


def exports(package: str, homes: dict[str, str]) -> Callable[[str], object]:
    """The module `__getattr__` of `package`: name -> attribute of `package.<homes[name]>`."""

    def __getattr__(name: str) -> object:
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{homes[name]}"), name)
        setattr(sys.modules[package], name, value)  # resolved once
        return value

    return __getattr__
