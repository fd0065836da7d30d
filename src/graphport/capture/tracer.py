"""The tracer: a tensor that carries a meta tensor and a graph node, and the dispatch
mode that records every ATen call made on such tensors into an `fx.Graph`.

Capture never runs real kernels: each op runs on the meta tensors inside the tracer
tensors, which gives output shapes and dtypes, and is recorded as a graph node.
Capture runs below autograd, so composite ops (`linear`, `conv2d`, ...) reach the mode
whole; those that export keeps are recorded as one node, the rest are expanded.

The graph is functional as it is recorded: an in-place op is recorded as its pure
variant and the mutated tensor is rebound to the new value; a write through a view is
scattered back to the view's base (see views.py), and other views of that base are
recomputed when next used.
"""
from __future__ import annotations

import contextlib
import operator
from typing import Any, Callable

import torch
import torch.fx as fx
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from ..errors import DataDependentError, OperatorError, UnsupportedFeatureError, UnsupportedOperatorError
from ..source import user_stack
from .meta_cache import MetaCache
from ..ops.kinds import Kind, op_info
from ..ops.views import ViewStep, replay, scatter_back

aten = torch.ops.aten
META = torch.device("meta")


class TracerTensor(torch.Tensor):
    """A stand-in for a real tensor during capture.

    It reports the real tensor's device, shape, strides and dtype; `gp_meta` holds the
    same metadata on the meta device for kernels to compute with, and `gp_node` is the
    graph value it currently stands for.
    """

    gp_meta: torch.Tensor
    gp_node: fx.Node
    gp_base: "TracerTensor | None"          # root tensor this one is a view of
    gp_chain: tuple[ViewStep, ...]          # view steps from gp_base to this tensor
    gp_version: int                         # base version gp_node was computed from
    gp_placeholder: fx.Node                 # for inputs and state: the placeholder it started as

    __torch_function__ = torch._C._disabled_torch_function_impl

    @staticmethod
    def __new__(cls, meta: torch.Tensor, device: torch.device, node: fx.Node,
                base: "TracerTensor | None" = None, chain: tuple[ViewStep, ...] = ()):
        t = torch.Tensor._make_wrapper_subclass(
            cls, meta.size(), strides=meta.stride(), storage_offset=meta.storage_offset(),
            dtype=meta.dtype, layout=meta.layout, device=device, requires_grad=meta.requires_grad)
        t.gp_meta = meta
        t.gp_node = node
        t.gp_base = base
        t.gp_chain = chain
        t.gp_version = base.gp_version if base is not None else 0
        return t

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise UnsupportedFeatureError(
            f"a tensor from a graphport capture was used after the capture ended (in {func})",
            fix="do not keep tensors from inside the exported forward (for example in a global or an attribute)")

    def __repr__(self) -> str:
        return f"TracerTensor({self.gp_node.name}: {_describe(self)})"

    def tolist(self):
        raise _data_dependent("converts a tensor to a Python list with .tolist()")

    def numpy(self, *args, **kwargs):
        raise _data_dependent("converts a tensor to NumPy with .numpy()")

    def __array__(self, *args, **kwargs):
        raise _data_dependent("converts a tensor to a NumPy array")

    def __deepcopy__(self, memo):
        return self


def _describe(t: torch.Tensor) -> str:
    return f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}"


_DATA_FIX = (
    "capture records one path through the program, so it cannot branch on a tensor's value.\n"
    "Compute both sides and choose with torch.where(pred, a, b) (a cond operator, "
    "torch.cond(pred, true_fn, false_fn, operands), is not captured by graphport yet);\n"
    "if the value only guards an assumption, state it with torch._check(...) on shapes instead.")


def _data_dependent(what: str) -> DataDependentError:
    return DataDependentError(f"the program {what}, which needs a tensor's runtime value", fix=_DATA_FIX)


# Ops whose *output shape* depends on tensor values.
_DATA_DEPENDENT_SHAPE = {
    aten.nonzero.default: "torch.nonzero / boolean-mask indexing",
    aten.masked_select.default: "masked_select / boolean-mask indexing",
    aten._unique2.default: "torch.unique",
    aten.unique_dim.default: "torch.unique",
    aten.unique_consecutive.default: "torch.unique_consecutive",
    aten.repeat_interleave.Tensor: "repeat_interleave with a tensor of repeats",
    aten.bincount.default: "torch.bincount",
}
# Ops that read a value into Python.
_DATA_READS = {
    aten.item.default: "reads a tensor's value into Python with .item()",
    aten._local_scalar_dense.default: "reads a tensor's value into Python (.item(), int(t), float(t) or an `if` on a tensor)",
    aten.is_nonzero.default: "uses a tensor as a Python bool (an `if`, `while`, `and`/`or` or bool(t) on a tensor)",
    aten.equal.default: "compares tensors with torch.equal, which returns a Python bool",
    aten.allclose.default: "compares tensors with torch.allclose, which returns a Python bool",
}


class Recorder:
    """Owns the graph being built and the mapping from tensors to graph values."""

    def __init__(self, entry_frame=None):
        self.graph = fx.Graph()
        self.entry_frame = entry_frame
        self.module_stack: list[tuple[str, str]] = []      # (fqn, qualified type) of active modules
        self.constants: dict[int, TracerTensor] = {}       # id(real tensor) -> its lifted tracer
        self.constant_values: dict[str, torch.Tensor] = {}  # target -> real tensor
        self.constant_names: dict[int, str] = {}           # id(attribute tensor) -> attribute fqn
        self.placeholders: list[fx.Node] = []               # in the order they were created
        self.lifted_count = 0
        self.sizes = None            # SizeValues, when the capture has symbolic sizes
        self.meta_cache = MetaCache()
        self.recording = True
        self.fallback_stack: tuple = ()   # source location for nodes made after the program returned
        self._keepalive: list[torch.Tensor] = []

    # -- graph values -------------------------------------------------------------------

    def placeholder(self, name: str, example: Any) -> fx.Node:
        node = self.graph.placeholder(name)
        node.meta["val"] = example
        self.placeholders.append(node)
        return node

    def tracer_for_placeholder(self, name: str, real: torch.Tensor, meta: torch.Tensor | None = None) -> TracerTensor:
        meta = _meta_like(real) if meta is None else meta
        node = self.placeholder(name, meta)
        tracer = TracerTensor(meta, real.device, node)
        tracer.gp_placeholder = node
        return tracer

    def constant(self, real: torch.Tensor) -> TracerTensor:
        """The tracer for a real tensor met during capture: a lifted constant input."""
        known = self.constants.get(id(real))
        if known is not None:
            return known
        target = self.constant_names.get(id(real))
        if target is None:
            target = f"lifted_tensor_{self.lifted_count}"
            self.lifted_count += 1
        tracer = self.tracer_for_placeholder("c_" + target.replace(".", "_"), real)
        tracer.gp_node.meta["gp_constant_target"] = target
        self.constants[id(real)] = tracer
        self.constant_values[target] = real
        self._keepalive.append(real)  # ids stay unique while capture runs
        return tracer

    def value(self, t: TracerTensor) -> fx.Node:
        """The graph value `t` stands for now, recomputing a stale view first."""
        base = t.gp_base
        if base is not None and t.gp_version != base.gp_version:
            node = self.value(base)
            for step in t.gp_chain:
                node = replay(step, node, self.emit)
            t.gp_node = node
            t.gp_version = base.gp_version
        return t.gp_node

    @contextlib.contextmanager
    def scratch(self):
        """Record into a throwaway graph: for computing metadata without keeping nodes."""
        graph = self.graph
        self.graph, self.recording = fx.Graph(), False
        try:
            yield
        finally:
            self.graph, self.recording = graph, True

    # -- recording ----------------------------------------------------------------------

    def emit(self, target: Callable, args: tuple, kwargs: dict | None = None) -> fx.Node:
        """Record one call whose arguments are already graph values, computing its meta."""
        kwargs = kwargs or {}
        meta_args, meta_kwargs = pytree.tree_map_only(fx.Node, lambda n: n.meta["val"], (args, kwargs))
        val = target(*meta_args, **meta_kwargs)
        return self._node(target, args, kwargs, val)

    def sym_value(self, v) -> Any:
        """The graph value of a symbolic size met in an op's arguments or the outputs."""
        return self.sizes.value(v, self.emit, cache=self.recording)

    def _node(self, target, args, kwargs, val) -> fx.Node:
        name = target.overloadpacket.__name__ if isinstance(target, torch._ops.OpOverload) else target.__name__
        node = self.graph.create_node("call_function", target, args, kwargs, name=name)
        node.meta["val"] = val
        if not self.recording:
            return node
        node.meta["gp_stack"] = user_stack(self.entry_frame) or self.fallback_stack
        node.meta["nn_module_stack"] = {f"L__self__{fqn}": (fqn, typ) for fqn, typ in self.module_stack}
        return node

    def wrap(self, val: Any, node: fx.Node, device: torch.device, view_of: TracerTensor | None = None,
             step: tuple | None = None) -> Any:
        """Tracer tensors for an op's meta output `val`, recorded as `node`."""
        if isinstance(val, torch.Tensor):
            return self._wrap_one(val, node, device, view_of, step, None)
        if isinstance(val, (tuple, list)):
            out = []
            for i, v in enumerate(val):
                if isinstance(v, torch.Tensor):
                    item = self._node(operator.getitem, (node, i), {}, v)
                    out.append(self._wrap_one(v, item, device, view_of, step, i))
                else:
                    out.append(v)
            return type(val)(out)
        return val

    def _wrap_one(self, meta, node, device, view_of, step, index):
        if view_of is None:
            return TracerTensor(meta, device, node)
        base = view_of.gp_base if view_of.gp_base is not None else view_of
        op, args, kwargs = step
        chain = view_of.gp_chain + (ViewStep(op, args, kwargs, index),)
        return TracerTensor(meta, device, node, base=base, chain=chain)

    def assign(self, t: TracerTensor, new_value: fx.Node) -> None:
        """Rebind `t` (and, through its view chain, its base) to a new value."""
        base = t.gp_base
        if base is None:
            t.gp_node = new_value
            t.gp_version += 1
            return
        # Values of each view along the chain, from the base's current value.
        values = [self.value(base)]
        for step in t.gp_chain[:-1]:
            values.append(replay(step, values[-1], self.emit))
        new = new_value
        for step, source in zip(reversed(t.gp_chain), reversed(values)):
            view_meta = new.meta["val"]
            new = scatter_back(step, source, new, source.meta["val"], view_meta, self.emit)
        base.gp_node = new
        base.gp_version += 1
        t.gp_node = new_value
        t.gp_version = base.gp_version
        t.gp_written = True

    def output_value(self, t: TracerTensor) -> fx.Node:
        """A returned tensor's value. A view that was written through is re-derived from its
        base, so that at run time it is a view of the base again, aliasing it as in eager."""
        if t.gp_base is not None and getattr(t, "gp_written", False):
            outer, self.fallback_stack = self.fallback_stack, t.gp_node.meta.get("gp_stack", ())  # the write's line
            node = self.value(t.gp_base)
            for step in t.gp_chain:
                node = replay(step, node, self.emit)
            self.fallback_stack = outer
            return node
        return self.value(t)


def _meta_like(real: torch.Tensor) -> torch.Tensor:
    if real.device.type == "meta":
        return real.detach()
    meta = torch.empty_strided(real.shape, real.stride(), dtype=real.dtype, device=META)
    if real.requires_grad:
        meta.requires_grad_(True)
    return meta


class CaptureMode(TorchDispatchMode):
    """Intercepts every ATen call during capture and records it through a Recorder."""

    def __init__(self, recorder: Recorder):
        super().__init__()
        self.rec = recorder

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        special = _SPECIAL.get(func)
        if special is not None:
            return special(self, *args, **kwargs)
        if func in _DATA_READS:
            raise _data_dependent(_DATA_READS[func])
        if func in _DATA_DEPENDENT_SHAPE:
            raise DataDependentError(
                f"the program uses {_DATA_DEPENDENT_SHAPE[func]}, whose output shape depends on tensor values",
                fix="keep shapes static: use torch.where(mask, x, other) or multiply by the mask instead of "
                    "selecting elements")
        info = op_info(func)
        if info.decompose:
            with self:
                out = func.decompose(*args, **kwargs)
            if out is not NotImplemented:
                return out
        if info.preserved:
            return self.call_preserved(func, args, kwargs)
        if info.kind is Kind.FUNCTIONAL:
            return self.call(func, args, kwargs)
        if info.kind is Kind.VIEW:
            return self.call(func, args, kwargs, view=True)
        return self.mutate(func, info, args, kwargs)

    # -- argument conversion ----------------------------------------------------------------

    def _value(self, a):
        if isinstance(a, TracerTensor):
            return self.rec.value(a)
        if isinstance(a, torch.Tensor):
            return self.rec.value(self.rec.constant(a))
        if isinstance(a, (torch.SymInt, torch.SymBool, torch.SymFloat)):
            return self.rec.sym_value(a)
        return a

    def _meta(self, a):
        if isinstance(a, TracerTensor):
            return a.gp_meta
        if isinstance(a, torch.Tensor):
            return self.rec.constant(a).gp_meta
        if isinstance(a, torch.device):
            return META
        return a

    def _device(self, args, kwargs) -> torch.device:
        device = kwargs.get("device")
        if device is not None:
            return torch.device(device)
        for a in pytree.tree_leaves(args):
            if isinstance(a, torch.Tensor):
                return a.device
        return torch.device("cpu")

    def run_meta(self, func, args, kwargs, cache: bool = True):
        meta_args, meta_kwargs = pytree.tree_map(self._meta, (args, kwargs))
        try:
            if not cache:
                return func(*meta_args, **meta_kwargs)
            return self.rec.meta_cache.run(func, meta_args, meta_kwargs, lambda: func(*meta_args, **meta_kwargs))
        except (NotImplementedError, RuntimeError) as e:
            text = str(e).lower()
            if "nonzero" in text or "data-dependent" in text or "data dependent" in text:
                raise DataDependentError(
                    f"the program calls {func.name()} in a way whose output shape depends on tensor values "
                    "(boolean-mask indexing such as x[x > 0] does this)",
                    fix="keep shapes static: use torch.where(mask, x, other) or multiply by the mask instead of "
                        "selecting elements") from None
            if isinstance(e, NotImplementedError) or "fake impl" in text or (
                    "meta" in text and ("not implemented" in text or "could not run" in text)):
                raise _no_meta_kernel(func, e) from None
            raise OperatorError(
                f"{func.name()} failed on the example inputs: {str(e).splitlines()[0][:500]}",
                fix="this call fails the same way in eager PyTorch; check the shapes and dtypes reaching it") from e

    # -- recording ------------------------------------------------------------------------

    def call(self, func, args, kwargs, view: bool = False):
        val = self.run_meta(func, args, kwargs, cache=not view)
        node_args, node_kwargs = pytree.tree_map(self._value, (args, kwargs))
        node = self.rec._node(func, node_args, node_kwargs, val)
        device = self._device(args, kwargs)
        if view and isinstance(args[0], TracerTensor):
            return self.rec.wrap(val, node, device, view_of=args[0], step=(func, tuple(node_args[1:]), node_kwargs))
        return self.rec.wrap(val, node, device)

    def call_preserved(self, func, args, kwargs):
        """A composite op kept as one node. Its output metadata comes from running its
        decomposition on the tracers, which report the real device: composite ops pick
        kernels by device (CPU attention returns a transposed layout), and strides decide
        later view-or-copy choices, so they must be the ones the real run will have."""
        node_args, node_kwargs = pytree.tree_map(self._value, (args, kwargs))

        def decomposed_meta():
            try:
                with self.rec.scratch():
                    with self:
                        out = func.decompose(*args, **kwargs)
            except UnsupportedFeatureError:
                return None  # its insides do what capture cannot express; its meta kernel can still answer
            return None if out is NotImplemented else pytree.tree_map_only(TracerTensor, lambda t: t.gp_meta, out)

        val = self.rec.meta_cache.run(("decomposed", func), args, kwargs, decomposed_meta)
        if val is None:
            return self.call(func, args, kwargs)
        node = self.rec._node(func, node_args, node_kwargs, val)
        return self.rec.wrap(val, node, self._device(args, kwargs))

    def mutate(self, func, info, args, kwargs):
        if info.functional is None:
            raise UnsupportedFeatureError(
                f"the in-place operator {func} has no functional counterpart graphport knows",
                fix="use the out-of-place form of the operation (for example `x = x.op(...)` instead of `x.op_(...)`)")
        self.run_meta(func, args, kwargs)  # eager's checks (dtype casts, broadcast into self)
        schema = func._schema
        bound = _bind(schema, args, kwargs)
        if info.kind is Kind.INPLACE:
            target = args[0]
            if func is aten.copy_.default and _overwrites_input(target, args[1]):
                self._write(target, args[1])  # the input's new value is the source itself
                return target
            if _changes_metadata(func):
                raise UnsupportedFeatureError(
                    f"the in-place operator {func} changes a tensor's shape or strides in place",
                    fix=f"use the out-of-place form: `x = x.{func.overloadpacket.__name__.rstrip('_')}(...)`")
            result = self.call(info.functional, args, kwargs)
            self._write(target, result)
            return target
        if info.kind is Kind.OUT:
            outs = [bound[name] for name in info.mutated_args]
            fargs, fkwargs = _unbind(info.functional._schema, bound)
            result = self.call(info.functional, fargs, fkwargs)
            results = result if isinstance(result, (tuple, list)) else (result,)
            for out, value in zip(outs, results):
                self._write(out, value)
            return outs[0] if len(outs) == 1 else tuple(outs)
        # MUTATING: the functional variant returns the op's results then the new values.
        fargs, fkwargs = _unbind(info.functional._schema, bound)
        result = self.call(info.functional, fargs, fkwargs)
        n_returns = len(schema.returns)
        for name, value in zip(info.mutated_args, result[n_returns:]):
            if bound.get(name) is not None:
                self._write(bound[name], value)
        kept = tuple(result[:n_returns])
        return kept[0] if n_returns == 1 else kept

    def _write(self, target, value: TracerTensor) -> None:
        """Make `target` hold `value` from now on, as an in-place write would."""
        if not isinstance(target, TracerTensor):
            raise UnsupportedFeatureError(
                "the program writes in place into a tensor that is not an input, parameter, buffer or "
                "a tensor computed inside forward",
                fix="register the tensor as a buffer (self.register_buffer(name, tensor)) so its update is captured")
        if tuple(value.shape) != tuple(target.shape):
            raise UnsupportedFeatureError(
                f"an out= or in-place write resizes a tensor from {list(target.shape)} to {list(value.shape)}",
                fix="assign the result to a new variable instead of writing into an existing tensor")
        node = self.rec.value(value)
        if value.dtype != target.dtype:
            node = self.rec.emit(aten._to_copy.default, (node,), {"dtype": target.dtype})
        self.rec.assign(target, node)


def _overwrites_input(dst, src) -> bool:
    """`buf.copy_(x)` on a whole input or buffer: its new value is x, no copy node needed."""
    return (isinstance(src, TracerTensor) and dst.gp_base is None and hasattr(dst, "gp_placeholder")
            and src.shape == dst.shape and src.dtype == dst.dtype and src.device == dst.device)


def _changes_metadata(func) -> bool:
    name = func.overloadpacket.__name__
    return name in {"t_", "transpose_", "squeeze_", "unsqueeze_", "resize_", "resize_as_", "as_strided_",
                    "swapdims_", "swapaxes_", "set_"}


def _bind(schema, args, kwargs) -> dict[str, Any]:
    bound = {}
    for i, a in enumerate(schema.arguments):
        if i < len(args) and not a.kwarg_only:
            bound[a.name] = args[i]
        elif a.name in kwargs:
            bound[a.name] = kwargs[a.name]
        elif a.has_default_value():
            bound[a.name] = a.default_value
        else:
            bound[a.name] = None
    return bound


def _unbind(schema, bound: dict[str, Any]) -> tuple[tuple, dict]:
    args, kwargs = [], {}
    for a in schema.arguments:
        if a.name not in bound:
            continue
        if a.kwarg_only:
            kwargs[a.name] = bound[a.name]
        else:
            args.append(bound[a.name])
    return tuple(args), kwargs


def _no_meta_kernel(func, error: Exception) -> UnsupportedOperatorError:
    name = func.name().split(".")[0]
    return UnsupportedOperatorError(
        f"the operator {name} has no meta (fake) kernel, so graphport cannot compute its output shape "
        f"without running it ({str(error).splitlines()[0][:200]})",
        fix=f'register a shape function for it:\n'
            f'    @torch.library.register_fake("{name}")\n'
            f'    def _(x, ...):\n'
            f'        return torch.empty_like(x)  # a tensor with the output\'s shape and dtype')


# -- ops with their own rules ---------------------------------------------------------------

def _lift_fresh(mode: CaptureMode, t, *rest):
    """`torch.tensor(data)` inside forward: a constant input, copied as torch.export does."""
    if isinstance(t, TracerTensor):
        return t
    return mode.call(aten.clone.default, (mode.rec.constant(t),), {})


def _alias(mode: CaptureMode, t, *rest):
    """detach/alias: the same value, sharing writes with its source."""
    node = mode.rec.value(t)
    base = t.gp_base if t.gp_base is not None else t
    return TracerTensor(t.gp_meta, t.device, node, base=base, chain=t.gp_chain + (ViewStep(None, (), {}),))


def _identity(mode: CaptureMode, t, *rest):
    return t


def _batch_norm(mode: CaptureMode, input, weight, bias, running_mean, running_var, training, momentum, eps,
                cudnn_enabled=True):
    """Batch norm at torch.export's level: one node, with running-stat updates as writes."""
    if not training:
        out = mode.call(aten._native_batch_norm_legit_no_training.default,
                        (input, weight, bias, running_mean, running_var, momentum, eps), {})
        return out[0]
    if running_mean is None:
        out = mode.call(aten._native_batch_norm_legit.no_stats, (input, weight, bias, True, momentum, eps), {})
        return out[0]
    out = mode.call(aten._native_batch_norm_legit_functional.default,
                    (input, weight, bias, running_mean, running_var, True, momentum, eps), {})
    mode._write(running_mean, out[3])
    mode._write(running_var, out[4])
    return out[0]


_SPECIAL: dict[Any, Callable] = {
    aten.lift_fresh.default: _lift_fresh,
    aten.lift_fresh_copy.default: _lift_fresh,
    aten.detach.default: _alias,
    aten.alias.default: _alias,
    aten.detach_.default: _identity,
    aten.batch_norm.default: _batch_norm,
}
