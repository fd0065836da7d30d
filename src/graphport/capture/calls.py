"""Module calls during capture: which call of which module each node belongs to, and the
boundary of the calls whose signature the user asked to preserve.

Each call of a module gets its own key in `nn_module_stack`: `L__self__{fqn}` for the first
call and `L__self__{fqn}@{n}` for the n-th later one, as torch.export writes them, so
`unflatten` tells `a(a(x))` apart from one call. For a preserved module the capture records
the graph values entering the call (its flattened arguments) and leaving it (its flattened
result) with their pytree specs. The flat graph gets no marker nodes: the boundary is the
recorded values, kept alive through dead-code elimination as calls the program made.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
from dataclasses import dataclass
from typing import Any, Iterator

import torch
import torch.fx as fx

from .. import _torch
from ..errors import UnsupportedFeatureError, UnsupportedInputError
from ..signature import (ConstantArgument, SymBoolArgument, SymFloatArgument, SymIntArgument, TensorArgument)
from .recorder import Recorder

pytree = _torch.pytree


@dataclass
class CallBoundary:
    """A preserved module's one call: the graph values at its boundary and their structure."""
    inputs: list            # ArgumentSpec per flattened (args, kwargs) leaf
    in_spec: Any
    forward_arg_names: list[str]
    outputs: list | None = None   # ArgumentSpec per flattened output leaf
    out_spec: Any = None


class ModuleCalls:
    """Global forward hooks keeping the recorder's module stack, one entry per call."""

    def __init__(self, rec: Recorder, module_names: dict[int, str]):
        self.rec = rec
        self.names = module_names
        self.counts: dict[str, int] = {}
        self.boundaries: dict[str, CallBoundary] = {}
        self._entries: dict[str, tuple[str, str, str]] = {}   # preserved fqn -> its stack entry

    def push(self, module: torch.nn.Module, args: tuple) -> None:
        name = self.names.get(id(module))
        if name is None:
            return
        n = self.counts.get(name, 0)
        self.counts[name] = n + 1
        typ = type(module)
        self.rec.module_stack.append((name if n == 0 else f"{name}@{n}", name, f"{typ.__module__}.{typ.__qualname__}"))

    def pop(self, module: torch.nn.Module, args: tuple, output: Any) -> None:
        if self.names.get(id(module)) is not None and self.rec.module_stack:
            self.rec.module_stack.pop()

    @contextlib.contextmanager
    def preserving(self, root: torch.nn.Module, fqns: tuple[str, ...]) -> Iterator[None]:
        """Record the boundary of each call of the modules named in `fqns`."""
        handles = []
        try:
            for fqn in fqns:
                module = preserved_module(root, fqn)
                handles.append(module.register_forward_pre_hook(functools.partial(self._enter, fqn), with_kwargs=True))
                handles.append(module.register_forward_hook(functools.partial(self._leave, fqn), with_kwargs=True))
            yield
        finally:
            for handle in handles:
                handle.remove()

    def _enter(self, fqn: str, module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        if fqn in self.boundaries:
            raise UnsupportedFeatureError(
                f"the module '{fqn}', whose call signature export was asked to preserve, is called more than once",
                fix=f"preserve the signature of a module called once, or remove '{fqn}' from "
                    "preserve_module_call_signature")
        if self.rec.scope is not self.rec.root:
            raise UnsupportedFeatureError(
                f"the module '{fqn}', whose call signature export was asked to preserve, is called inside a "
                "control-flow branch or loop body", fix=f"remove '{fqn}' from preserve_module_call_signature")
        entry = self.rec.module_stack.pop()   # its inputs are made by the caller, outside the call
        try:
            flat, in_spec = pytree.tree_flatten((args, kwargs))
            self.boundaries[fqn] = CallBoundary([self._argument(v) for v in flat], in_spec, _arg_names(module, args))
        finally:
            self.rec.module_stack.append(entry)
        self._entries[fqn] = entry

    def _leave(self, fqn: str, module: torch.nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        self.rec.module_stack.append(self._entries[fqn])   # its outputs are made inside the call
        try:
            flat, out_spec = pytree.tree_flatten(output)
            boundary = self.boundaries[fqn]
            boundary.outputs, boundary.out_spec = [self._argument(v) for v in flat], out_spec
        finally:
            self.rec.module_stack.pop()

    def _argument(self, value: Any):
        """The signature entry of one boundary leaf; its node is kept through dead-code elimination.
        Hooks run in the program's code, under the capture mode: the size nodes a leaf may need
        compute their values on meta tensors outside it (they are no constants of the program)."""
        with _torch.outside_dispatch_modes():
            node = self.rec.graph_arg(value)
        if not isinstance(node, fx.Node):
            return ConstantArgument("", node)
        self.rec.user_calls.add(node)
        kind = _SYMBOLIC.get(type(node.meta.get("val")), TensorArgument)
        return kind(node.name)


_SYMBOLIC = {torch.SymInt: SymIntArgument, torch.SymFloat: SymFloatArgument, torch.SymBool: SymBoolArgument}


def preserved_module(root: torch.nn.Module, fqn: str) -> torch.nn.Module:
    try:
        return root.get_submodule(fqn)
    except AttributeError:
        known = [name for name, _ in root.named_modules() if name]
        raise UnsupportedInputError(
            f"preserve_module_call_signature names '{fqn}', which is not a submodule of the model",
            fix=f"name submodules by their path in model.named_modules(), e.g. {known[:5]}") from None


def _arg_names(module: torch.nn.Module, args: tuple) -> list[str]:
    try:
        params = list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)][:len(args)]
