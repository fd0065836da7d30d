"""Capture: run the user's program once on tracer tensors and record it as a graph.

`capture()` swaps the module's parameters and buffers for tracer tensors, flattens the
inputs, runs the program under the capture mode, then assembles the graph's outputs
(state mutations first, then user outputs) and its signature.
"""
from __future__ import annotations

import builtins
import contextlib
import functools
import inspect
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

import sympy
import torch
import torch.fx as fx
from torch._dispatch.python import enable_python_dispatcher
from torch.utils import _pytree as pytree

from ..errors import UnsupportedFeatureError, UnsupportedInputError
from ..pytree import key_to_str, leaf_name, path_to_str
from ..shapes.node import symint
from ..shapes.spec import InputShapes
from ..signature import (ConstantArgument, ExportGraphSignature, InputKind, InputSpec, OutputKind, OutputSpec,
                         SymIntArgument, TensorArgument)
from .sizes import SizeValues, is_sym
from ..source import SourceLocation, format_stack_trace, location_in_traceback
from .tracer import CaptureMode, Recorder, TracerTensor

SCALAR_TYPES = (int, float, bool, str, torch.dtype, torch.device, type(None))


@dataclass
class Captured:
    """What capture hands to the rest of the pipeline."""
    graph: fx.Graph
    signature: ExportGraphSignature
    state_dict: dict[str, torch.Tensor]
    constants: dict[str, torch.Tensor]
    in_spec: pytree.TreeSpec
    out_spec: pytree.TreeSpec
    input_paths: list[str] = field(default_factory=list)   # printable path of each flat user input
    input_aliases: dict[int, int] = field(default_factory=dict)  # flat input index -> earlier index it must be
    forward_arg_names: list[str] = field(default_factory=list)


def capture(fn: Callable, args: tuple, kwargs: dict, root: torch.nn.Module | None,
            shapes: InputShapes | None = None) -> Captured:
    """Run `fn` once on tracers; `shapes` gives input tensors symbolic sizes."""
    rec = Recorder(entry_frame=sys._getframe(0))
    state = _State(root, rec) if root is not None else None
    arg_names = argument_names(fn, args, kwargs)
    flat, in_spec = pytree.tree_flatten_with_path((args, kwargs))
    input_nodes: dict[int, fx.Node] = {}
    user_specs, tracer_leaves, paths, aliases = [], [], [], {}
    seen: dict[int, int] = {}   # id(tensor) -> index of its first occurrence among the leaves
    for i, (path, leaf) in enumerate(flat):
        name, printable = _leaf_naming(path, arg_names)
        paths.append(printable)
        if isinstance(leaf, torch.Tensor):
            meta = symbolic_meta(leaf, shapes.sizes[i], shapes.env) if shapes is not None else None
            tracer = own = rec.tracer_for_placeholder(name, leaf, meta)
            input_nodes[i] = own.gp_node
            first = seen.setdefault(id(leaf), i)
            if first != i:
                # The same tensor passed twice (mha(x, x, x)): the program may test `q is k`,
                # so it sees one tensor, and calls must pass one tensor there too.
                aliases[i] = first
                tracer = tracer_leaves[first]
            tracer_leaves.append(tracer)
            user_specs.append(InputSpec(InputKind.USER_INPUT, TensorArgument(own.gp_node.name)))
        elif isinstance(leaf, SCALAR_TYPES):
            node = rec.placeholder(name, leaf)
            tracer_leaves.append(leaf)
            user_specs.append(InputSpec(InputKind.USER_INPUT, ConstantArgument(node.name, leaf)))
        else:
            raise UnsupportedInputError(
                f"input {printable} is a {type(leaf).__qualname__}, which graphport cannot flatten into "
                "tensors and constants",
                fix="pass tensors, Python scalars or strings in tuples, lists, dicts or namedtuples; for your own "
                    "container class, call graphport.register_dataclass(cls) (dataclasses) or "
                    "torch.utils._pytree.register_pytree_node")
    tracer_args, tracer_kwargs = pytree.tree_unflatten(tracer_leaves, in_spec)
    if shapes is not None:
        rec.sizes = SizeValues(shapes.env, input_nodes)

    with contextlib.ExitStack() as stack:
        if state is not None:
            stack.enter_context(state.swapped())
            stack.enter_context(_module_stack_hooks(rec, state.module_names))
        stack.enter_context(_exporting_flags())
        stack.enter_context(_refuse_torch_cond())
        if shapes is not None:
            # torch's Python meta kernels and references handle symbolic sizes; many C++ ones do not
            stack.enter_context(enable_python_dispatcher())
            stack.enter_context(_symbolic_min_max())
        stack.enter_context(torch._C._AutoDispatchBelowADInplaceOrView())
        mode = stack.enter_context(CaptureMode(rec))
        out = _run(fn, tracer_args, tracer_kwargs)
        if state is not None:
            state.collect_reassigned()

    flat_out, out_spec = pytree.tree_flatten_with_path(out)
    # Values made from here on (sizes returned, views re-derived) have no frame of their
    # own: they are attributed to the program's last recorded line.
    last = next((n for n in reversed(rec.graph.nodes) if n.meta.get("gp_stack")), None)
    rec.fallback_stack = last.meta["gp_stack"] if last is not None else _definition_site(fn)
    output_values, output_specs = [], []
    if state is not None:
        for tracer, kind, target in state.mutations():
            output_values.append(rec.value(tracer))
            output_specs.append((kind, target))
    for i, (tracer, spec) in enumerate(zip(tracer_leaves, user_specs)):
        if i in aliases:
            continue
        if isinstance(tracer, TracerTensor) and rec.value(tracer) is not tracer.gp_placeholder:
            output_values.append(rec.value(tracer))
            output_specs.append((OutputKind.USER_INPUT_MUTATION, spec.arg.name))
    for path, leaf in flat_out:
        if isinstance(leaf, TracerTensor):
            output_values.append(rec.output_value(leaf))
            output_specs.append((OutputKind.USER_OUTPUT, None))
        elif isinstance(leaf, torch.Tensor):
            output_values.append(rec.value(rec.constant(leaf)))
            output_specs.append((OutputKind.USER_OUTPUT, None))
        elif is_sym(leaf):
            output_values.append(rec.sym_value(leaf))
            output_specs.append((OutputKind.USER_OUTPUT, None))
        elif isinstance(leaf, SCALAR_TYPES):
            output_values.append(leaf)
            output_specs.append((OutputKind.USER_OUTPUT, None))
        else:
            raise UnsupportedInputError(
                f"output {path_to_str('output', path)} is a {type(leaf).__qualname__}, which graphport cannot "
                "flatten into tensors and constants",
                fix="return tensors, Python scalars, or containers of them (register your own with "
                    "graphport.register_dataclass)")
    rec.graph.output(tuple(output_values))

    input_specs = (state.input_specs() if state is not None else []) + _constant_specs(rec) + user_specs
    _order_placeholders(rec.graph, [s.arg.name for s in input_specs])
    out_specs = []
    for value, (kind, target) in zip(output_values, output_specs):
        if isinstance(value, fx.Node):
            is_size = isinstance(value.meta.get("val"), torch.SymInt)
            arg = SymIntArgument(value.name) if is_size else TensorArgument(value.name)
        else:
            arg = ConstantArgument("", value)
        out_specs.append(OutputSpec(kind, arg, target))
    for node in rec.graph.nodes:
        stack_ = node.meta.pop("gp_stack", None)
        if stack_:
            node.meta["stack_trace"] = format_stack_trace(stack_)
    return Captured(
        graph=rec.graph,
        signature=ExportGraphSignature(input_specs, out_specs),
        state_dict=state.state_dict() if state is not None else {},
        constants={**(state.non_persistent() if state is not None else {}), **rec.constant_values},
        in_spec=in_spec,
        out_spec=out_spec,
        input_paths=paths,
        input_aliases=aliases,
        forward_arg_names=list(arg_names),
    )


def _definition_site(fn: Callable) -> tuple[SourceLocation, ...]:
    """Where the captured function is defined: the location of values made outside any op."""
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    try:
        code = inspect.unwrap(target).__code__
    except AttributeError:
        return ()
    return (SourceLocation(code.co_filename, code.co_firstlineno, code.co_name),)


def symbolic_meta(real: torch.Tensor, sizes: list, env) -> torch.Tensor:
    """A meta tensor whose sizes are our symbols, strided in the same order as `real`."""
    sym_sizes = [symint(s, env) if isinstance(s, sympy.Basic) else s for s in sizes]
    strides: list = [0] * real.dim()
    step = 1
    for d in sorted(range(real.dim()), key=lambda d: (real.stride(d), -d)):
        strides[d] = step
        step = step * sym_sizes[d]
    meta = torch.empty_strided(sym_sizes, strides, dtype=real.dtype, device="meta")
    return meta.requires_grad_(True) if real.requires_grad else meta


def _run(fn: Callable, args: tuple, kwargs: dict) -> Any:
    try:
        return fn(*args, **kwargs)
    except NotImplementedError as e:
        if "HigherOrderOperator" not in str(e):
            raise
        op = str(e).split("HigherOrderOperator ")[1].split(" ")[0]
        raise UnsupportedFeatureError(
            f"the program calls torch's higher-order operator '{op}' (torch.cond, torch.map, while_loop, scan), "
            "which graphport cannot capture yet",
            fix="replace the data-dependent branch with torch.where(pred, a, b) computing both sides, or unroll "
                "the loop in Python over a static count",
            location=location_in_traceback(e.__traceback__)) from None


def _constant_specs(rec: Recorder) -> list[InputSpec]:
    specs = []
    for node in rec.placeholders:
        target = node.meta.get("gp_constant_target")
        if target is not None:
            specs.append(InputSpec(InputKind.CONSTANT_TENSOR, TensorArgument(node.name), target))
    return specs


def _order_placeholders(graph: fx.Graph, names: list[str]) -> None:
    """Placeholders in signature order: parameters, buffers, constants, user inputs."""
    by_name = {n.name: n for n in graph.nodes if n.op == "placeholder"}
    anchor = next((n for n in graph.nodes if n.op != "placeholder"), None)
    for name in names:
        anchor.prepend(by_name[name])


def argument_names(fn: Callable, args: tuple, kwargs: dict) -> list[str]:
    """Names of the positional arguments, from the signature of forward / the function."""
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    try:
        params = list(inspect.signature(target).parameters.values())
    except (TypeError, ValueError):
        return [f"arg{i}" for i in range(len(args))]
    names = []
    for i in range(len(args)):
        if i < len(params) and params[i].kind in (params[i].POSITIONAL_ONLY, params[i].POSITIONAL_OR_KEYWORD):
            names.append(params[i].name)
        else:
            var = next((p.name for p in params if p.kind is p.VAR_POSITIONAL), "args")
            names.append(f"{var}_{i - len([p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)])}")
    return names


def input_paths(args: tuple, kwargs: dict, arg_names: list[str]) -> list[str]:
    """Printable path (`d['a'][0]`) of every flat input leaf, in flattening order."""
    flat = pytree.tree_flatten_with_path((args, kwargs))[0]
    return [_leaf_naming(path, arg_names)[1] for path, _ in flat]


def _leaf_naming(path: tuple, arg_names: list[str]) -> tuple[str, str]:
    """(placeholder name, printable path) of a flat input leaf from its (args, kwargs) path."""
    group, first, rest = path[0].idx, path[1], path[2:]
    root = arg_names[first.idx] if group == 0 else str(first.key)
    return leaf_name([root] + [key_to_str(k) for k in rest]), path_to_str(root, rest)


class _State:
    """The module's parameters, buffers and tensor attributes, and their tracers."""

    def __init__(self, root: torch.nn.Module, rec: Recorder):
        self.root = root
        self.rec = rec
        self.module_names: dict[int, str] = {}
        for name, mod in root.named_modules(remove_duplicate=False):
            self.module_names.setdefault(id(mod), name)
        self.params: list[tuple[str, torch.Tensor, TracerTensor]] = []
        self.buffers: list[tuple[str, torch.Tensor, TracerTensor, bool]] = []
        self.by_id: dict[int, TracerTensor] = {}
        for name, p in root.named_parameters():
            t = rec.tracer_for_placeholder("p_" + name.replace(".", "_"), p)
            self.params.append((name, p, t))
            self.by_id[id(p)] = t
        for name, b in root.named_buffers():
            owner, _, attr = name.rpartition(".")
            persistent = attr not in root.get_submodule(owner)._non_persistent_buffers_set
            t = rec.tracer_for_placeholder("b_" + name.replace(".", "_"), b)
            self.buffers.append((name, b, t, persistent))
            self.by_id[id(b)] = t
        for mod_name, mod in root.named_modules():
            for attr, value in vars(mod).items():
                if isinstance(value, torch.Tensor) and id(value) not in self.by_id:
                    rec.constant_names.setdefault(id(value), f"{mod_name}.{attr}" if mod_name else attr)
        self.reassigned: dict[str, torch.Tensor] = {}

    @contextlib.contextmanager
    def swapped(self):
        """Module state replaced by tracers for the duration of capture, restored after."""
        saved = []
        for _, mod in self.root.named_modules(remove_duplicate=False):
            for table in (mod._parameters, mod._buffers):
                for key, value in list(table.items()):
                    if value is not None and id(value) in self.by_id:
                        saved.append((table, key, value))
                        table[key] = self.by_id[id(value)]
        try:
            yield
        finally:
            for table, key, value in saved:
                table[key] = value

    def collect_reassigned(self) -> None:
        """Buffers the program replaced with `self.buf = new_tensor`: captured as writes."""
        for name, _, tracer, _ in self.buffers:
            owner, _, attr = name.rpartition(".")
            current = self.root.get_submodule(owner)._buffers.get(attr)
            if current is not tracer and isinstance(current, torch.Tensor):
                self.reassigned[name] = current

    def mutations(self):
        for name, _, tracer in self.params:
            if tracer.gp_node is not tracer.gp_placeholder:
                yield tracer, OutputKind.PARAMETER_MUTATION, name
        for name, _, tracer, _ in self.buffers:
            if name in self.reassigned:
                new = self.reassigned[name]
                yield (new if isinstance(new, TracerTensor) else self.rec.constant(new)), OutputKind.BUFFER_MUTATION, name
            elif tracer.gp_node is not tracer.gp_placeholder:
                yield tracer, OutputKind.BUFFER_MUTATION, name

    def input_specs(self) -> list[InputSpec]:
        specs = [InputSpec(InputKind.PARAMETER, TensorArgument(t.gp_placeholder.name), name)
                 for name, _, t in self.params]
        specs += [InputSpec(InputKind.BUFFER, TensorArgument(t.gp_placeholder.name), name, persistent)
                  for name, _, t, persistent in self.buffers]
        return specs

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {**{n: p for n, p, _ in self.params}, **{n: b for n, b, _, keep in self.buffers if keep}}

    def non_persistent(self) -> dict[str, torch.Tensor]:
        """Non-persistent buffers live with the constants, as in torch.export."""
        return {n: b for n, b, _, keep in self.buffers if not keep}


@contextlib.contextmanager
def _module_stack_hooks(rec: Recorder, module_names: dict[int, str]):
    """Track which modules are running, for each node's nn_module_stack."""
    def push(module, args):
        name = module_names.get(id(module))
        if name is not None:
            typ = type(module)
            rec.module_stack.append((name, f"{typ.__module__}.{typ.__qualname__}"))

    def pop(module, args, output):
        if module_names.get(id(module)) is not None and rec.module_stack:
            rec.module_stack.pop()

    pre = torch.nn.modules.module.register_module_forward_pre_hook(push)
    post = torch.nn.modules.module.register_module_forward_hook(pop, always_call=True)
    try:
        yield
    finally:
        pre.remove()
        post.remove()
        rec.module_stack.clear()


@contextlib.contextmanager
def _symbolic_min_max():
    """`max(x.shape[0], 3)` keeps the size symbolic (torch.sym_max) instead of guarding on a
    comparison, as torch.export's non-strict mode does."""
    real_max, real_min = builtins.max, builtins.min

    def pick(real, symbolic):
        def choose(*args, **kwargs):
            values = args[0] if len(args) == 1 and not kwargs and isinstance(args[0], (list, tuple)) else args
            if not kwargs and len(values) >= 2 and any(is_sym(v) for v in values) \
                    and all(isinstance(v, (int, torch.SymInt)) for v in values):
                return functools.reduce(symbolic, values)
            return real(*args, **kwargs)
        return choose

    builtins.max, builtins.min = pick(real_max, torch.sym_max), pick(real_min, torch.sym_min)
    try:
        yield
    finally:
        builtins.max, builtins.min = real_max, real_min


@contextlib.contextmanager
def _refuse_torch_cond():
    """torch.cond compiles its branches with torch's own machinery when called outside it.
    A Python or size predicate picks its branch here (a size predicate is guarded like an
    `if`); a tensor predicate is refused before torch runs, until graphport captures cond."""
    real = torch.cond

    def cond(pred, true_fn, false_fn, operands=(), *args, **kwargs):
        if isinstance(pred, torch.Tensor):
            raise UnsupportedFeatureError(
                "the program calls torch.cond on a tensor predicate, which graphport cannot capture yet",
                fix="compute both branches and choose with torch.where(pred, a, b), or export each branch "
                    "separately")
        return (true_fn if pred else false_fn)(*operands)

    torch.cond = cond
    try:
        yield
    finally:
        torch.cond = real


@contextlib.contextmanager
def _exporting_flags():
    """torch.compiler.is_exporting() / is_compiling() answer True while we capture."""
    import torch.compiler as tc
    saved = tc._is_exporting_flag, tc._is_compiling_flag
    tc._is_exporting_flag = tc._is_compiling_flag = True
    try:
        yield
    finally:
        tc._is_exporting_flag, tc._is_compiling_flag = saved
