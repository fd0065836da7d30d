"""`move_to_device_pass`: the same program, with its tensors and device arguments on another device.

A program exported on CPU records the device in three places: its state (parameters,
buffers, constants, the example inputs), the device arguments of its operators (`device=` of
a factory, `_to_copy`'s target, `to.device`'s positional device), and each node's
`meta["val"]`, which reports the device the value has at run time. All three move together,
so the moved program runs on the new device and tells passes that read `val.device` the
truth. The program given is left as it was: the graphs are copied (node metadata shallowly,
tensor values of `meta["val"]` replaced, never changed in place) and the state is moved by
`Tensor.to`, which copies only what changes device.
"""
from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, Callable

import torch
import torch.fx as fx

from .. import _torch
from ..op_args import map_args
from ..values import RuntimeValue, graph_copy

if TYPE_CHECKING:   # passes take a program and return ep.replace(...): they sit below program.py
    from ..program import ExportedProgram

Location = torch.device | str | dict


def move_to_device_pass(ep: ExportedProgram, location: Location) -> ExportedProgram:
    """A new program computing what `ep` computes, on another device.

    `location` is a device (`"meta"`, `"cuda:0"`, a `torch.device`), which every tensor and
    device argument moves to, or a dict mapping a current device's name to a new one
    (`{"cpu": "cuda:0"}`); a device the dict does not name stays where it is. As
    torch.export.passes.move_to_device_pass, except that `ep` is not changed."""
    move_device = _device_mover(location)
    moved: dict[int, torch.Tensor] = {}    # a tensor held under two names (tied weights) moves once

    def move_tensor(t: torch.Tensor) -> torch.Tensor:
        if id(t) not in moved:
            device = move_device(t.device)
            is_parameter = isinstance(t, torch.nn.Parameter)
            moved[id(t)] = torch.nn.Parameter(t.detach().to(device), t.requires_grad) if is_parameter else t.to(device)
        return moved[id(t)]

    example_inputs = None
    if ep.example_inputs is not None:
        example_inputs = _torch.pytree.tree_map_only(torch.Tensor, move_tensor, ep.example_inputs)
    return ep.replace(
        graph_module=_moved_graph_module(ep.graph_module, move_device),
        graph_signature=copy.deepcopy(ep.graph_signature),
        state_dict={name: move_tensor(t) for name, t in ep.state_dict.items()},
        module_call_graph=list(ep.module_call_graph), example_inputs=example_inputs,
        constants={name: move_tensor(t) if isinstance(t, torch.Tensor) else t for name, t in ep.constants.items()},
        input_paths=list(ep.input_paths), input_aliases=dict(ep.input_aliases), shape_report=list(ep.shape_report))


def _device_mover(location: Location) -> Callable[[torch.device], torch.device]:
    """The new device of a tensor or argument now on a given device."""
    if isinstance(location, dict):
        table = {str(torch.device(old)): torch.device(new) for old, new in location.items()}
        return lambda device: table.get(str(device), device)
    target = torch.device(location)
    return lambda device: target


def _moved_graph_module(gm: fx.GraphModule, move_device: Callable[[torch.device], torch.device]) -> fx.GraphModule:
    """A copy of `gm` and its subgraphs (cond branches, loop bodies) with every device moved."""
    root = torch.nn.Module()
    for name, child in gm.named_children():
        root.add_module(name, _moved_graph_module(child, move_device) if isinstance(child, fx.GraphModule)
                        else child)
    graph = graph_copy(gm.graph)    # new nodes of the same names; each node's meta dict copied, not its values
    for node in graph.nodes:
        node.args = map_args(lambda a: _moved_argument(a, move_device), node.args)
        node.kwargs = map_args(lambda a: _moved_argument(a, move_device), node.kwargs)
        if "val" in node.meta:
            node.meta["val"] = map_args(lambda v: _moved_value(v, move_device), node.meta["val"])
    return _torch.lazy_graph_module(root, graph)


def _moved_argument(arg: Any, move_device: Callable[[torch.device], torch.device]) -> Any:
    """A device argument of an operator (`device=`, `to.device`'s device) on its new device."""
    return move_device(arg) if isinstance(arg, torch.device) else arg


def _moved_value(val: Any, move_device: Callable[[torch.device], torch.device]) -> Any:
    """A node's run-time value description on its new device (the same sizes and strides)."""
    if isinstance(val, RuntimeValue):
        return RuntimeValue(val.gp_meta, move_device(val.device))
    return val
