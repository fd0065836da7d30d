"""The modules of an unflattened program, and the loop that runs their graphs.

Each module of the original hierarchy becomes an `InterpreterModule` of a class named
like the original one (`Linear`, `LlamaAttention`), holding its parameters and buffers at
their original names and the graph of its call. A module whose calls compute different
things (called on inputs of other static shapes, or reading a buffer another call wrote)
gets one module per distinct call, `name@1`, ... next to the first, as torch.export's
unflatten names them; those share the first one's tensors, so state is never duplicated.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx

from .. import _torch
from ..errors import InternalError, UnsupportedFeatureError
from .convention import check_accepts, structure_mismatch

pytree = _torch.pytree

_CLASSES: dict[str, type] = {}
_SYM_SIZE = torch.ops.aten.sym_size.int


class InterpreterModule(torch.nn.Module):
    """A module of the unflattened hierarchy: runs the graph of its call.

    A preserved module (`signature` set) takes and returns exactly what the original did;
    any other one takes the values its call received as flat positional arguments."""

    def __init__(self) -> None:
        super().__init__()
        self.graph: fx.Graph | None = None
        self.fqn = ""
        self.signature = None
        self.__dict__["_gp_root"] = None        # plain attributes, not submodules
        self.__dict__["_gp_subgraphs"] = {}

    def forward(self, *args, **kwargs):
        if self.graph is None:
            raise UnsupportedFeatureError(
                f"the module '{self.fqn}' ran no operation in the exported program, so its unflattened form has "
                "no code of its own", fix="call the module that contains it, or the unflattened program itself",
                find_location=False)
        if self.signature is None:
            return run(self, self.graph, args)
        flat, spec = pytree.tree_flatten((args, kwargs))
        if spec != self.signature.in_spec:
            raise structure_mismatch(self.fqn, "was called with", self.signature.in_spec, spec)
        return pytree.tree_unflatten(run(self, self.graph, flat), self.signature.out_spec)

    def __getitem__(self, index: int | str) -> torch.nn.Module:
        """`unflat.layers[0]`: a container's children by position, as ModuleList and Sequential have them."""
        if isinstance(index, int):
            return list(self._modules.values())[index]
        return self._modules[index]


def interpreter_class(type_name: str | None) -> type:
    """A subclass of InterpreterModule named like the original module's class."""
    if not type_name:
        return InterpreterModule
    cls = _CLASSES.get(type_name)
    if cls is None:
        module, _, name = type_name.rpartition(".")
        made = type(name, (InterpreterModule,), {"__module__": module or __name__, "__qualname__": name})
        cls = _CLASSES.setdefault(type_name, made)   # one class per name, also when threads race here
    return cls


def clone_for_call(original: InterpreterModule) -> InterpreterModule:
    """Another module of the same class holding the same tensors and children (another call's graph)."""
    clone = type(original)()
    clone.fqn = original.fqn
    clone._parameters.update(original._parameters)
    clone._buffers.update(original._buffers)
    clone._non_persistent_buffers_set.update(original._non_persistent_buffers_set)
    clone._modules.update(original._modules)
    for name in original.__dict__.get("_gp_constants", ()):
        setattr(clone, name, getattr(original, name))
    clone.__dict__["_gp_constants"] = list(original.__dict__.get("_gp_constants", ()))
    clone.__dict__.update({k: original.__dict__[k] for k in ("_gp_root", "_gp_subgraphs")})
    return clone


def _attribute(owner: torch.nn.Module, target: str) -> Any:
    value = owner
    for part in target.split("."):
        value = getattr(value, part)
    return value


def run(module: torch.nn.Module, graph: fx.Graph, args) -> tuple:
    """Run one call's graph on `args` (its placeholders, in order)."""
    env: dict[fx.Node, Any] = {}
    values = iter(args)
    for node in graph.nodes:
        op = node.op
        if op == "call_function":
            a, k = fx.node.map_arg((node.args, node.kwargs), env.__getitem__)
            # a size is read off the tensor: under a new export it stays a symbolic size, not a recorded call
            env[node] = a[0].size(a[1]) if node.target is _SYM_SIZE else node.target(*a, **k)
        elif op == "placeholder":
            env[node] = next(values)
        elif op == "get_attr":
            if node.meta.get("gp_subgraph"):
                env[node] = module.__dict__["_gp_subgraphs"][node.target]
            elif node.meta.get("gp_absolute"):
                env[node] = _attribute(module.__dict__["_gp_root"], node.target)
            else:
                env[node] = _attribute(module, node.target)
        elif op == "call_module":
            a, k = pytree.tree_map_only(fx.Node, env.__getitem__, (node.args, node.kwargs))
            sub = _attribute(module.__dict__["_gp_root"] if node.meta.get("gp_absolute") else module, node.target)
            call = node.meta["gp_call"]
            if call.signature is not None:
                placed = sub.__dict__.get("_gp_call_modules", {}) if isinstance(sub, InterpreterModule) else {}
                # fx keeps dicts of node arguments as immutable_dict: rebuild the recorded containers
                a, k = pytree.tree_unflatten(pytree.tree_leaves((a, k)), call.signature.in_spec)
                if call in placed:
                    sub = placed[call]   # the module unflatten placed: this call's own graph
                else:
                    check_accepts(call.fqn, call.signature, sub, a, k)   # a module the user swapped in
            env[node] = sub(*a, **k)
        elif op == "output":
            return fx.node.map_arg(node.args[0], env.__getitem__)
    raise InternalError("unflatten: a call's graph has no output node")
