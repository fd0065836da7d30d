"""`graphport.unflatten`: the module hierarchy back from a flat exported program.

    calls.py        the flat graph cut into module calls; what crosses each call's boundary
    graphs.py       one fx graph per call
    modules.py      the modules that hold the state and run the graphs
    convention.py   the calling convention a preserved signature freezes, and its checks

Built from each node's `nn_module_stack` and `ep.module_call_graph` only: the user's code
is never run again.
"""
from __future__ import annotations

import abc
import inspect
from typing import Any

import torch
import torch.fx as fx

from .. import _torch
from ..errors import FlatArgsError, InputStructureError
from ..passes.effect_tokens import without_effect_tokens
from ..signature import InputKind
from .calls import Call, CallTree, call_tree
from .convention import check_accepts
from .graphs import frame_graph
from .modules import InterpreterModule, clone_for_call, interpreter_class, run

pytree = _torch.pytree

__all__ = ["unflatten", "UnflattenedModule", "InterpreterModule", "FlatArgsAdapter"]

NO_ADAPTER = "There is no flat args adapter specified. Are you sure you are calling this with the right arguments?"


class FlatArgsAdapter(abc.ABC):
    """Maps the flat arguments of a call whose input structure differs from the export's to the
    exported program's flat arguments, as torch.export.unflatten.FlatArgsAdapter does: an
    unflattened program given one (`unflatten(ep, adapter)`) can be called with another
    structure, for instance when it is swapped into another program whose caller passes more
    (or other) arguments. The adapted arguments are then checked as any call's are."""

    @abc.abstractmethod
    def adapt(self, target_spec: Any, input_spec: Any, input_args: list[Any],
              metadata: dict[str, Any] | None = None, obj: Any | None = None) -> list[Any]:
        """The exported program's flat arguments (`target_spec`'s leaves) from the call's
        (`input_args`, structured as `input_spec`); `obj` is the call's positional arguments."""

    def get_flat_arg_paths(self) -> list[str]:
        """Names of the adapted arguments, for messages (optional)."""
        return []


def unflatten(ep, flat_args_adapter: FlatArgsAdapter | None = None) -> "UnflattenedModule":
    """An nn.Module with the exported module's hierarchy, state at its original names, and
    forward computing what `ep.module()` computes; submodules exported with a preserved call
    signature keep their calling convention and can be swapped (`set_submodule`). A call with
    another input structure goes through `flat_args_adapter`, when given. A lowered program's
    effect tokens are removed first (passes/effect_tokens.py), as torch's unflatten does."""
    ep = without_effect_tokens(ep)
    return _with_original_arguments(ep)(ep, flat_args_adapter)


def _with_original_arguments(ep) -> type:
    """UnflattenedModule whose forward shows the exported call's argument names, so that
    `inspect.signature` (and a dynamic_shapes spec keyed by name) sees them."""
    call = ep.call_spec
    if call.in_spec is None or not call.forward_arg_names:
        return UnflattenedModule
    args_spec, kwargs_spec = call.in_spec.children()
    names = list(call.forward_arg_names)[:args_spec.num_children]
    if len(names) < args_spec.num_children or not all(n.isidentifier() for n in names):
        return UnflattenedModule
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    params += [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names]
    params += [inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY) for k in kwargs_spec.context or []
               if isinstance(k, str) and k.isidentifier() and k not in names]

    def forward(self, *args, **kwargs):
        return UnflattenedModule.forward(self, *args, **kwargs)
    forward.__signature__ = inspect.Signature(params)
    return type("UnflattenedModule", (UnflattenedModule,), {"forward": forward, "__module__": __name__})


class UnflattenedModule(torch.nn.Module):
    """The root of an unflattened program: checks inputs as `ep.module()` does, then runs the
    root's graph, which calls the submodules. `preserved` maps each preserved path to its
    signature."""

    def __init__(self, ep, flat_args_adapter: FlatArgsAdapter | None = None) -> None:
        super().__init__()
        self.flat_args_adapter = flat_args_adapter
        self.meta: dict[str, Any] = {}    # handed to the adapter, as torch's module does
        self.graph: fx.Graph
        self.__dict__["_gp_root"] = self
        self.__dict__["_gp_checker"] = ep.module()   # ep.module()'s input checks, at the top level
        self._in_spec, self._out_spec = ep.call_spec.in_spec, ep.call_spec.out_spec
        # a preserved module's later calls (`fqn@1`, ...) share its convention: the first call's entry names it
        self.preserved = {e.fqn: e.signature for e in ep.module_call_graph[1:]
                          if e.signature is not None and "@" not in e.fqn}
        tree = call_tree(ep)
        graphs = {call: frame_graph(call, tree, ep) for call in [tree.root, *tree.calls]}
        modules = _hierarchy(self, ep, tree)
        _state(self, ep)
        subgraphs = dict(ep.graph_module.named_children())   # control-flow branches and bodies
        self.__dict__["_gp_subgraphs"] = subgraphs
        for module in modules.values():
            module.__dict__.update(_gp_root=self, _gp_subgraphs=subgraphs)
        self.graph = graphs[tree.root]
        _assign(self, tree.root, graphs, modules, _keys(tree, graphs))

    def forward(self, *args, **kwargs):
        flat, spec = pytree.tree_flatten((args, kwargs))
        try:
            # exported again: the structure is checked here, shapes by the new capture's own contract
            if spec != self._in_spec or not torch.compiler.is_exporting():
                flat = self.__dict__["_gp_checker"].checked_leaves(args, kwargs)
        except InputStructureError as err:
            if spec == self._in_spec:
                raise
            flat = self._adapted(flat, spec, args, err)
        return pytree.tree_unflatten(list(run(self, self.graph, flat)), self._out_spec)

    def _adapted(self, flat: list, spec: Any, args: tuple, refusal: InputStructureError) -> list:
        """The flat arguments of a call of another structure, through the FlatArgsAdapter."""
        if self.flat_args_adapter is None:
            raise FlatArgsError(refusal.what, fix=f"{refusal.fix}; or unflatten with a "
                                "graphport.unflatten.FlatArgsAdapter that maps this structure to the exported one",
                                torch_phrase=NO_ADAPTER, location=refusal.location)
        adapted = self.flat_args_adapter.adapt(target_spec=self._in_spec, input_spec=spec, input_args=flat,
                                               metadata=self.meta, obj=args)
        if len(adapted) != self._in_spec.num_leaves:
            raise FlatArgsError(
                f"the FlatArgsAdapter gave {len(adapted)} arguments; the program takes {self._in_spec.num_leaves}",
                fix="make the adapter's adapt() return one value per leaf of target_spec",
                torch_phrase=f"Flat args adaption failed, number of args mismatch Adapted: {len(adapted)} \n"
                             f"Exported module: {self._in_spec.num_leaves}")
        self.__dict__["_gp_checker"].check_leaves(adapted)
        return adapted

    __getitem__ = InterpreterModule.__getitem__

    def state_dict(self, *args, **kwargs):
        """The original model's names: the copies made for calls that differ (`a@1`) hold the
        same tensors as the module they copy, and are not state of their own."""
        state = super().state_dict(*args, **kwargs)
        for key in [k for k in state if any("@" in part for part in k.split("."))]:
            del state[key]
        return state

    def set_submodule(self, target: str, module: torch.nn.Module, strict: bool = False) -> None:
        """Swap a submodule; one whose signature was preserved must accept its calling convention."""
        signature = self.preserved.get(target)
        if signature is not None:
            check_accepts(target, signature, module)
        super().set_submodule(target, module, strict=strict)


def _hierarchy(root: UnflattenedModule, ep, tree: CallTree) -> dict[str, InterpreterModule]:
    """Every module path of the original, with its class name; shared modules stay shared."""
    types: dict[str, str] = {}
    for call in tree.calls:
        types.setdefault(call.fqn, call.type_name)
    modules: dict[str, torch.nn.Module] = {"": root}

    def ensure(fqn: str) -> torch.nn.Module:
        if fqn not in modules:
            parent, _, name = fqn.rpartition(".")
            module = interpreter_class(types.get(fqn))()
            module.fqn = fqn
            ensure(parent).add_module(name, module)
            modules[fqn] = module
        return modules[fqn]

    for entry in ep.module_call_graph[1:]:
        if "@" in entry.fqn:
            continue   # a later call of a preserved module, not a module path
        alias = getattr(entry, "alias_of", None)
        if alias is None or alias not in modules:
            ensure(entry.fqn)
        elif entry.fqn not in modules:
            parent, _, name = entry.fqn.rpartition(".")
            ensure(parent).add_module(name, modules[alias])
            modules[entry.fqn] = modules[alias]
    for fqn in list(types) + [s.target.rpartition(".")[0] for s in ep.graph_signature.input_specs if s.target]:
        ensure(fqn)
    return {fqn: m for fqn, m in modules.items() if fqn}


def _state(root: UnflattenedModule, ep) -> None:
    """Parameters, buffers and constant tensors at their original names (the same tensors)."""
    for spec in ep.graph_signature.input_specs:
        if spec.kind is InputKind.USER_INPUT:
            continue
        owner_fqn, _, name = spec.target.rpartition(".")
        owner = root.get_submodule(owner_fqn)
        if spec.kind is InputKind.PARAMETER:
            value = ep.state_dict[spec.target]
            owner.register_parameter(name, value if isinstance(value, torch.nn.Parameter)
                                     else torch.nn.Parameter(value, requires_grad=False))
        elif spec.kind is InputKind.BUFFER:
            value = ep.state_dict.get(spec.target, ep.constants.get(spec.target))
            owner.register_buffer(name, value, persistent=spec.persistent is not False)
        else:
            setattr(owner, name, ep.constants[spec.target])
            owner.__dict__.setdefault("_gp_constants", []).append(name)
    lifted = {spec.target for spec in ep.graph_signature.input_specs}
    for fqn, value in ep.state_dict.items():   # a tied tensor's other names: the same tensor there too
        if fqn in lifted:
            continue
        owner_fqn, _, name = fqn.rpartition(".")
        owner = root.get_submodule(owner_fqn)
        if isinstance(value, torch.nn.Parameter):
            owner.register_parameter(name, value)
        else:
            owner.register_buffer(name, value)


def _keys(tree: CallTree, graphs: dict[Call, fx.Graph]) -> dict[Call, str]:
    """A text per call that two calls share exactly when they compute the same thing the same way."""
    keys: dict[Call, str] = {}

    def key(call: Call) -> str:
        if call in keys:
            return keys[call]
        graph = graphs[call]
        index = {node: i for i, node in enumerate(graph.nodes)}
        lines = []
        for node in graph.nodes:
            args = fx.node.map_arg((node.args, node.kwargs), lambda n: f"%{index[n]}")
            target = key(node.meta["gp_call"]) if node.op == "call_module" else \
                "" if node.op == "placeholder" else node.target
            lines.append(f"{node.op} {target} {args} {node.meta.get('gp_absolute')}")
        keys[call] = "\n".join(lines)
        return keys[call]

    for call in tree.calls:
        key(call)
    return keys


def _assign(owner: torch.nn.Module, call: Call, graphs: dict[Call, fx.Graph], modules: dict[str, torch.nn.Module],
            keys: dict[Call, str], assigned: dict[str, str] | None = None) -> None:
    """Give each call's graph to a module, top down, naming the call_module targets.

    A target is the callee's path relative to the caller's module; a module that calls one
    outside its own subtree (a sibling it holds a plain reference to) calls it by its path
    from the root."""
    assigned = {} if assigned is None else assigned      # fqn -> key of the graph its module holds
    claimed: set[tuple[int, str]] = set()               # (container, child name) this call already calls
    root = owner.__dict__["_gp_root"]
    for node in graphs[call].nodes:
        if node.op != "call_module":
            continue
        child: Call = node.meta["gp_call"]
        module = modules[child.fqn]
        if assigned.setdefault(child.fqn, keys[child]) != keys[child]:
            module = clone_for_call(module)
        inside = not call.fqn or child.fqn.startswith(call.fqn + ".")
        path, _, name = (call.relative(child.fqn) if inside else child.fqn).rpartition(".")
        container = (owner if inside else root).get_submodule(path)
        if child.signature is not None:
            # every call of a preserved module goes to its path, so a module swapped in there takes them
            # all; the module unflatten placed there runs each call's own graph (`call_modules`)
            modules[child.fqn].__dict__.setdefault("_gp_call_modules", {})[child] = module
        else:
            if (id(container), name) in claimed and container._modules[name] is not module:
                name = f"{name}@{child.index}"
            container.add_module(name, module)   # a clone's first call of a child replaces the child it copied
            claimed.add((id(container), name))
        node.target = f"{path}.{name}" if path else name
        node.meta["gp_absolute"] = not inside
        if module.graph is None or module is not modules[child.fqn]:
            module.graph = graphs[child]
            module.signature = child.signature
            _assign(module, child, graphs, modules, keys, assigned)
