"""A registered function given by import path ``package.module:function`` is imported on first use, so that
registering it (at import of the module that names it) never imports the module that holds it."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def resolved_target(spec: Any) -> Callable[..., Any]:
    """``spec.target`` as a function: itself where callable, else the function its import path names,
    imported now and kept on the (frozen) ``spec`` in its place."""
    if callable(spec.target):
        return spec.target
    module_name, _, attribute = spec.target.partition(":")
    function = getattr(importlib.import_module(module_name), attribute)
    object.__setattr__(spec, "target", function)
    return function
