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
from dataclasses import dataclass, field
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
    """One call of a preserved module: the graph values at its boundary and their structure.
    The first call is recorded under the module's path, the n-th later one under `path@n`,
    as torch.export's module_call_graph names them."""
    inputs: list            # ArgumentSpec per flattened (args, kwargs) leaf
    in_spec: Any
    forward_arg_names: list[str]
    outputs: list | None = None   # ArgumentSpec per flattened output leaf
    out_spec: Any = None
    state_writes: dict[str, str] = field(default_factory=dict)   # buffer written by the call -> its new value's node


class ModuleCalls:
    """Global forward hooks keeping the recorder's module stack, one entry per call."""

    def __init__(self, rec: Recorder, module_names: dict[int, str]):
        self.rec = rec
        self.names = module_names
        self.counts: dict[str, int] = {}
        self.boundaries: dict[str, CallBoundary] = {}        # call key (`fqn`, `fqn@1`, ...) -> its boundary
        # preserved fqn -> (key, stack entry, buffer values at entry) of its open calls
        self._open: dict[str, list[tuple[str, tuple[str, str, str], dict]]] = {}

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
        if self.rec.scope is not self.rec.root:
            raise UnsupportedFeatureError(
                f"the module '{fqn}', whose call signature export was asked to preserve, is called inside a "
                "control-flow branch or loop body", fix=f"remove '{fqn}' from preserve_module_call_signature")
        entry = self.rec.module_stack.pop()   # its inputs are made by the caller, outside the call
        calls = sum(1 for key in self.boundaries if key == fqn or key.startswith(fqn + "@"))
        key = fqn if calls == 0 else f"{fqn}@{calls}"
        try:
            flat, in_spec = pytree.tree_flatten((args, kwargs))
            first = self.boundaries.get(fqn)
            if first is not None and in_spec != first.in_spec:
                raise UnsupportedFeatureError(
                    f"the module '{fqn}', whose call signature export was asked to preserve, is called with "
                    f"arguments of another structure than at its first call (call {calls + 1}: "
                    f"{' '.join(str(in_spec).split())}; first: {' '.join(str(first.in_spec).split())}), so it "
                    "has no one calling convention", fix=f"call '{fqn}' the same way each time (the same "
                    "positional arguments and keywords), or remove it from preserve_module_call_signature")
            self.boundaries[key] = CallBoundary([self._argument(v) for v in flat], in_spec, _arg_names(module, args))
        finally:
            self.rec.module_stack.append(entry)
        self._open.setdefault(fqn, []).append((key, entry, self._buffer_values(fqn, module)))

    def _leave(self, fqn: str, module: torch.nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        key, entry, before = self._open[fqn].pop()
        self.rec.module_stack.append(entry)   # its outputs are made inside the call
        try:
            flat, out_spec = pytree.tree_flatten(output)
            boundary = self.boundaries[key]
            boundary.outputs, boundary.out_spec = [self._argument(v) for v in flat], out_spec
            for target, node in self._buffer_values(fqn, module).items():
                if before.get(target) is not node:
                    self.rec.user_calls.add(node)   # a later call reads it as the buffer's state
                    boundary.state_writes[target] = node.name
        finally:
            self.rec.module_stack.pop()

    def _buffer_values(self, fqn: str, module: torch.nn.Module) -> dict[str, fx.Node]:
        """The graph value each buffer of the module holds now (its tracer's current node)."""
        values = {}
        for name, buffer in module.named_buffers(prefix=fqn):
            found = self.rec.root.binding(buffer) if isinstance(buffer, torch.Tensor) else None
            if found is not None:
                values[name] = found[0]
        return values

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
