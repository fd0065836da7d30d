"""The calling convention a preserved signature freezes, and the checks on a replacement.

A preserved submodule is called with the structure of (args, kwargs) it was called with
at export (`in_spec`: how many positional arguments, which keywords, which containers)
and must return the structure it returned then (`out_spec`). A module swapped in for it
must accept the one and produce the other; when it does not, the error names both.
"""
from __future__ import annotations

import inspect
from typing import Any

import torch

from .. import _torch
from ..errors import CallSignatureError

pytree = _torch.pytree


def summary(spec: Any) -> str:
    return " ".join(str(spec).split())


def call_form(signature) -> str:
    """`forward(hidden, mask=...)`: how the preserved call passed its arguments."""
    args_spec, kwargs_spec = signature.in_spec.children()
    names = list(signature.forward_arg_names or [])
    positional = [names[i] if i < len(names) else f"arg{i}" for i in range(args_spec.num_children)]
    keywords = [f"{key}=..." for key in (kwargs_spec.context or [])]
    return f"forward({', '.join(positional + keywords)})"


def structure_mismatch(fqn: str, what: str, expected: Any, given: Any) -> CallSignatureError:
    return CallSignatureError(
        f"the submodule at '{fqn}' {what} a structure other than its preserved signature's:\n"
        f"  expected {summary(expected)}\n  given    {summary(given)}",
        fix=f"make the module placed at '{fqn}' return exactly the structure the original returned (same "
            "containers, keys and number of tensors)", find_location=False)


def check_accepts(fqn: str, signature, module: torch.nn.Module, args: tuple | None = None,
                  kwargs: dict | None = None) -> None:
    """Raise CallSignatureError unless `module` can be called as the preserved call was."""
    if args is None:
        args, kwargs = pytree.tree_unflatten([None] * signature.in_spec.num_leaves, signature.in_spec)
    forward = module.forward if isinstance(module, torch.nn.Module) else module
    try:
        params = inspect.signature(forward)
    except (TypeError, ValueError):
        return
    try:
        params.bind(*args, **kwargs)
    except TypeError as e:
        raise CallSignatureError(
            f"the submodule at '{fqn}' is called as {call_form(signature)}, the calling convention its preserved "
            f"signature froze, but the module given there ({type(module).__qualname__}) takes "
            f"forward{params} ({e})",
            fix=f"give '{fqn}' a module whose forward accepts {call_form(signature)}, or wrap yours in one that "
                "adapts the arguments", find_location=False) from None
