"""Inputs: the user's arguments flattened to leaves, named, and turned into placeholders."""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable

import sympy
import torch

from .. import _torch
from ..errors import UnsupportedInputError
from ..pytree import flatten_with_paths, key_to_str, leaf_name, path_to_str
from ..shapes.node import symint
from ..shapes.spec import InputShapes
from ..signature import ConstantArgument, InputKind, InputSpec, SymIntArgument, TensorArgument
from .recorder import Recorder

pytree = _torch.pytree
SCALAR_TYPES = (int, float, bool, str, torch.dtype, torch.device, type(None))


@dataclass
class UserInputs:
    """The flattened inputs as the program sees them during capture."""
    leaves: list[Any]                      # per flat input: its tracer or Python value
    specs: list[InputSpec]                 # per flat input: its signature entry
    in_spec: Any                           # pytree spec of (args, kwargs)
    paths: list[str]                       # printable path of each flat input (`x['a'][0]`)
    aliases: dict[int, int] = field(default_factory=dict)   # flat index -> earlier index it must be
    nodes: dict[int, Any] = field(default_factory=dict)     # flat index -> placeholder of a tensor or SymInt input

    def rebuild(self) -> tuple[tuple, dict]:
        """(args, kwargs) for the program: fresh containers around the tracers, made by each
        container's pytree unflatten, as torch.export does. Call it inside the capture: a
        registered container's unflatten may run tensor ops on its leaves (transformers'
        DynamicCache concatenates them into its layers), and those belong in the graph. The
        caller's own containers never reach the program, so what it does to them in Python
        (a cache appending to its layers) cannot leak tracers into them."""
        return pytree.tree_unflatten(self.leaves, self.in_spec)


def trace_inputs(rec: Recorder, args: tuple, kwargs: dict, arg_names: list[str],
                 shapes: InputShapes | None) -> UserInputs:
    flat, in_spec = flatten_with_paths((args, kwargs))
    leaves, specs, paths, aliases, nodes = [], [], [], {}, {}
    seen: dict[int, int] = {}   # id(tensor) -> index of its first occurrence among the leaves
    for i, (path, leaf) in enumerate(flat):
        name, printable = leaf_naming(path, arg_names)
        paths.append(printable)
        if isinstance(leaf, torch.Tensor) and leaf.layout is not torch.strided:
            raise UnsupportedInputError(
                f"input {printable} is a {str(leaf.layout).removeprefix('torch.')} tensor; graphport captures "
                "dense (strided) tensors only",
                fix=f"pass {printable}.to_dense(), or convert it inside forward")
        if isinstance(leaf, torch.Tensor):
            meta = symbolic_meta(leaf, shapes.sizes[i], shapes.env) if shapes is not None else None
            tracer = own = rec.tracer_for_placeholder(name, leaf, meta)
            nodes[i] = rec.root_value(own)
            first = seen.setdefault(id(leaf), i)
            if first != i:
                # The same tensor passed twice (mha(x, x, x)): the program may test `q is k`,
                # so it sees one tensor, and calls must pass one tensor there too.
                aliases[i] = first
                tracer = leaves[first]
            leaves.append(tracer)
            specs.append(InputSpec(InputKind.USER_INPUT, TensorArgument(nodes[i].name)))
        elif shapes is not None and i in shapes.scalars:
            # a dynamic int: a SymInt placeholder, its uses computed from it at run time
            value = symint(shapes.scalars[i], shapes.env)
            nodes[i] = rec.placeholder(name, value)
            rec.real_values[nodes[i]] = leaf
            leaves.append(value)
            specs.append(InputSpec(InputKind.USER_INPUT, SymIntArgument(nodes[i].name)))
        elif isinstance(leaf, SCALAR_TYPES):
            node = rec.placeholder(name, leaf)
            rec.real_values[node] = leaf
            leaves.append(leaf)
            specs.append(InputSpec(InputKind.USER_INPUT, ConstantArgument(node.name, leaf)))
        else:
            raise UnsupportedInputError(
                f"input {printable} is a {type(leaf).__qualname__}, which graphport cannot flatten into "
                "tensors and constants",
                fix="pass tensors, Python scalars or strings in tuples, lists, dicts or namedtuples; for your own "
                    "container class, call graphport.register_dataclass(cls) (dataclasses) or "
                    "torch.utils._pytree.register_pytree_node")
    return UserInputs(leaves, specs, in_spec, paths, aliases, nodes)


def symbolic_meta(real: torch.Tensor, sizes: list, env) -> torch.Tensor:
    """A meta tensor whose sizes are our symbols, strided in the same order as `real`."""
    meta = laid_out(sizes, list(real.stride()), real.dtype, env)
    return meta.requires_grad_(True) if real.requires_grad else meta


def laid_out(sizes: list, like_strides: list[int], dtype: torch.dtype, env) -> torch.Tensor:
    """A dense meta tensor of `sizes` (ints or sympy expressions of `env`'s symbols) whose
    dimensions are ordered in memory as concrete strides `like_strides` order them. A
    number size 0 counts as 1 in the strides, as in eager (a pinned trace at size 0 must see
    eager's strides); a symbolic size counts as itself (see pointwise_meta.contiguous)."""
    sym_sizes = [symint(s, env) if isinstance(s, sympy.Basic) else s for s in sizes]
    strides: list = [0] * len(sizes)
    step = 1
    for d in sorted(range(len(sizes)), key=lambda d: (like_strides[d], -d)):
        strides[d] = step
        step = step * (max(sym_sizes[d], 1) if type(sym_sizes[d]) is int else sym_sizes[d])
    deferral = getattr(env, "deferral", None)
    if deferral is None:
        return torch.empty_strided(sym_sizes, strides, dtype=dtype, device="meta")
    # Making the tensor asks whether a size is 0 (its storage size); the answer assumed there
    # is the input's own metadata, proven at the small sizes like any operator's.
    func, kwargs = torch.ops.aten.empty_strided.default, {"dtype": dtype, "device": torch.device("meta")}
    with deferral.metadata_of("meta", func, (sym_sizes, strides), kwargs) as result:
        result.append(func(sym_sizes, strides, **kwargs))
    return result[0]


def argument_names(fn: Callable, args: tuple, kwargs: dict) -> list[str]:
    """Names of the positional arguments, from the signature of forward / the function."""
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    try:
        params = list(inspect.signature(target).parameters.values())
    except (TypeError, ValueError):
        return [f"arg{i}" for i in range(len(args))]
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    var = next((p.name for p in params if p.kind is p.VAR_POSITIONAL), "args")
    return [positional[i].name if i < len(positional) else f"{var}_{i - len(positional)}" for i in range(len(args))]


def input_paths(args: tuple, kwargs: dict, arg_names: list[str]) -> list[str]:
    """Printable path (`d['a'][0]`) of every flat input leaf, in flattening order."""
    flat = flatten_with_paths((args, kwargs))[0]
    return [leaf_naming(path, arg_names)[1] for path, _ in flat]


def leaf_naming(path: tuple, arg_names: list[str]) -> tuple[str, str]:
    """(placeholder name, printable path) of a flat input leaf from its (args, kwargs) path."""
    group, first, rest = path[0].idx, path[1], path[2:]
    root = arg_names[first.idx] if group == 0 else str(first.key)
    return leaf_name([root] + [key_to_str(k) for k in rest]), path_to_str(root, rest)
