"""Node metadata as torch.export's consumers read it, written once the program is final.

Capture computes every value on the meta device; torch's fake values instead report the
device the value has at run time (`cpu`, `cuda`), and passes written for torch.export read
`val.device`, `tensor_meta`, `torch_fn` and friends. Each tensor `val` becomes a
`RuntimeValue`: the same sizes (symbolic ones included), strides and dtype, reporting the
recorded device, still computing on the meta device when an operator is applied to it.
"""
from __future__ import annotations

import copy
from typing import Any

import torch
import torch.fx as fx
from torch.fx.passes.shape_prop import TensorMetadata

from . import _torch
from .op_args import map_args
from .graph_code import keyword_safe

pytree = _torch.pytree
DEVICE_KEY = "gp_device"     # set by capture on the nodes whose device it knows


class RuntimeValue(torch.Tensor):
    """A value's metadata, reporting its run-time device; operators on it run on its meta
    twin and give RuntimeValues on the same device, as torch's fake tensors do."""

    gp_meta: torch.Tensor
    __slots__ = ("gp_meta",)   # no attribute dict: one tracked object less per node of a program

    __torch_function__ = _torch.disabled_torch_function_impl

    @staticmethod
    def __new__(cls, meta: torch.Tensor, device: torch.device):
        t = _torch.make_wrapper_subclass(
            cls, meta.size(), strides=meta.stride(), storage_offset=meta.storage_offset(),
            dtype=meta.dtype, layout=meta.layout, device=device, requires_grad=meta.requires_grad,
            storage_size=meta.untyped_storage().nbytes())   # given: torch would work it out again from symbolic sizes
        t.gp_meta = meta
        return t

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        device = next(a.device for a in pytree.tree_leaves((args, kwargs)) if isinstance(a, RuntimeValue))
        meta_args, meta_kwargs = pytree.tree_map_only(RuntimeValue, lambda v: v.gp_meta, (args, kwargs or {}))
        out = func(*meta_args, **meta_kwargs)
        return pytree.tree_map_only(torch.Tensor, lambda v: RuntimeValue(v, device) if v.is_meta else v, out)

    def __repr__(self) -> str:
        return f"RuntimeValue({str(self.dtype).removeprefix('torch.')}{list(self.shape)}, device='{self.device}')"

    def __deepcopy__(self, memo):
        return self


def capture_value(val: Any) -> Any:
    """The value as capture computes with it: each RuntimeValue's meta twin."""
    return pytree.tree_map_only(RuntimeValue, lambda v: v.gp_meta, val)


def finish_metadata(gm: fx.GraphModule) -> None:
    """Every node of `gm` and of its subgraphs: `val` on its run-time device, and
    `tensor_meta` for tensors."""
    # a value lifted into subgraphs is the outer node's own object: converted once for all
    made: dict[tuple[int, torch.device], tuple] = {}   # (id(val), device) -> (val, converted, tensor_meta)
    sizes: dict[tuple[int, ...], torch.Size] = {}    # static shapes, one immutable Size object each
    for graph_module in [gm, *(m for m in gm.modules() if isinstance(m, fx.GraphModule) and m is not gm)]:
        devices: dict[fx.Node, torch.device] = {}
        for node in graph_module.graph.nodes:
            device = node.meta.pop(DEVICE_KEY, None) or _device_of_inputs(node, devices)
            devices[node] = device
            if "val" in node.meta:
                val = node.meta["val"]
                found = made.get((id(val), device))
                if found is None:
                    converted = _on_device(val, device)
                    found = made[(id(val), device)] = (val, converted, _tensor_meta(converted, sizes))
                node.meta["val"] = found[1]
                if found[2] is not None:
                    node.meta["tensor_meta"] = found[2]


def _device_of_inputs(node: fx.Node, devices: dict[fx.Node, torch.device]) -> torch.device:
    for arg in node.all_input_nodes:
        if isinstance(arg.meta.get("val"), torch.Tensor) and arg in devices:
            return devices[arg]
    return torch.device("cpu")


def _on_device(val: Any, device: torch.device) -> Any:
    # a RuntimeValue is finished already (on the meta device too): finishing is idempotent
    if type(val) is torch.Tensor:   # most values: one tensor, not a structure to map over
        return RuntimeValue(val, device) if val.is_meta else val
    return map_args(lambda v: RuntimeValue(v, device) if isinstance(v, torch.Tensor) and v.is_meta
                    and not isinstance(v, RuntimeValue) else v, val)


def _tensor_meta(val: Any, sizes: dict[tuple[int, ...], torch.Size]) -> Any:
    if isinstance(val, torch.Tensor):
        shape = val.shape
        if all(type(s) is int for s in shape):   # a symbolic size is neither hashable nor shared
            shape = sizes.setdefault(tuple(shape), shape)
        return TensorMetadata(shape, val.dtype, val.requires_grad, val.stride(), _memory_format(val),
                              False, {})
    if isinstance(val, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in val):
        return type(val)(_tensor_meta(v, sizes) for v in val)
    return None


def _memory_format(val: torch.Tensor) -> torch.memory_format | None:
    """The format the strides follow, decided only for static shapes (a symbolic one would
    need a guard to compare)."""
    if not all(type(s) is int for s in (*val.shape, *val.stride())):
        return None
    for fmt in (torch.contiguous_format, torch.channels_last, torch.channels_last_3d):
        if (fmt is torch.channels_last and val.dim() != 4) or (fmt is torch.channels_last_3d and val.dim() != 5):
            continue
        if getattr(val, "gp_meta", val).is_contiguous(memory_format=fmt):
            return fmt
    return None


def graph_copy(graph: fx.Graph) -> fx.Graph:
    """A copy of `graph` to change without touching it: new nodes with the same names and new
    metadata dicts holding the same values (fx's own copy renames a node called like a
    builtin, `input`)."""
    copied = copy.deepcopy(graph)
    for source, node in zip(graph.nodes, copied.nodes):
        node.name = source.name
    return copied


def module_copy(gm: fx.GraphModule, memo: dict | None = None) -> fx.GraphModule:
    """`copy.deepcopy(gm)` whose nodes keep their names, its subgraphs' too: fx's copy renames
    a node called like a builtin (`input` -> `input_1`), and a program's signature names its
    placeholders."""
    copied = copy.deepcopy(gm, memo)
    for source, twin in zip(gm.modules(), copied.modules()):
        if isinstance(source, fx.GraphModule):
            for node, copy_of_node in zip(source.graph.nodes, twin.graph.nodes):
                copy_of_node.name = node.name
            twin.recompile()
    return copied


def plain_copy(gm: fx.GraphModule) -> fx.GraphModule:
    """A copy of `gm` to print, its subgraphs' too: fx prints annotations plainly (`f32[2, 3]`)
    only for plain and fake tensors, so each value of the copy is its meta twin (same sizes
    and dtype). `gm` itself is not touched: another thread may be reading its metadata."""
    graph = graph_copy(gm.graph)
    for node in graph.nodes:
        val = node.meta.get("val")
        if isinstance(val, RuntimeValue):
            node.meta["val"] = val.gp_meta
    shown = fx.GraphModule(gm, keyword_safe(graph), class_name=gm._get_name())
    for name, child in gm.named_children():
        if isinstance(child, fx.GraphModule):
            setattr(shown, name, plain_copy(child))
    return shown
