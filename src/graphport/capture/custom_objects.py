"""Custom objects: instances of TorchBind classes (`torch.classes.ns.Name`) the module holds.

torch.export lifts each such object the program uses to an input of kind CUSTOM_OBJ
(placeholder `obj_<attribute path>`, the object itself in `ep.constants` under its
attribute path), records each method call as `torch.ops.higher_order.call_torchbind(obj,
"method", *args)`, and passes the object's placeholder to custom operators that take it.
Capture does the same, so torch's ecosystem reads the program.

The real object never runs during capture (its C++ code cannot see symbolic sizes, and a
call could change its state). Each call's output metadata comes from the object's fake
class, registered in Python with `torch._library.register_fake_class("ns::Name")`: capture
rebuilds a fake copy from the object's `__obj_flatten__()` (its tensors as metadata) with
the fake class's `__obj_unflatten__`, and runs the fake method, or the custom operator's
fake kernel given the fake copy. The program keeps the calls in the order the code made
them: they are effectful (never dead code), and `run_decompositions()` threads an effect
token through them (`with_effects`), as torch's lowering does.
"""
from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx as fx

from .. import _torch
from ..errors import InternalError, UnsupportedFeatureError
from ..op_args import map_args
from ..signature import CustomObjArgument, InputKind, InputSpec

pytree = _torch.pytree
call_torchbind = torch.ops.higher_order.call_torchbind


def is_custom_object(value: Any) -> bool:
    return isinstance(value, torch.ScriptObject)


def _key(obj: torch.ScriptObject) -> int:
    """The object's identity: Python wrappers of one C++ object differ (each method call
    makes a new one as its owner), their hash is the C++ object's."""
    return hash(obj)


def class_name(obj: torch.ScriptObject) -> tuple[str, str]:
    """(torch's qualified class name `__torch__.torch.classes.ns.Name`, the registry's `ns::Name`)."""
    qualified = obj._type().qualified_name()
    ns, _, name = qualified.removeprefix("__torch__.torch.classes.").rpartition(".")
    return qualified, f"{ns}::{name}"


class CustomObjects:
    """The custom objects of the module being captured, lifted as the program uses them."""

    def __init__(self, rec):
        self.rec = rec
        self.names: dict[int, str] = {}        # object's key -> attribute path
        self.lifted: dict[int, fx.Node] = {}   # object's key -> its placeholder
        self.objects: dict[int, torch.ScriptObject] = {}   # object's key -> the object the module holds
        self.fakes: dict[int, Any] = {}

    def find_in(self, root: torch.nn.Module) -> None:
        for mod_name, mod in root.named_modules():
            for attr, value in vars(mod).items():
                if is_custom_object(value) and _key(value) not in self.names:
                    self.names[_key(value)] = f"{mod_name}.{attr}" if mod_name else attr
                    self.objects[_key(value)] = value   # the module's own wrapper of it

    def node(self, obj: torch.ScriptObject) -> fx.Node:
        """The placeholder of `obj`, made on first use."""
        if self.rec.scope is not self.rec.root:
            raise UnsupportedFeatureError(
                f"the program uses the custom object {self._label(obj)} inside a torch.cond branch or a loop body; "
                "control-flow operators take tensors and ints only (torch.export refuses it too)",
                fix="call the object's method (or the custom op taking it) outside the branch and pass its result "
                    "in as an operand")
        found = self.lifted.get(_key(obj))
        if found is not None:
            return found
        target = self.names.get(_key(obj))
        qualified, short = class_name(obj)
        if target is None:
            raise UnsupportedFeatureError(
                f"the program uses a custom object of class {short} that no attribute of the exported module "
                "holds (it was passed in or made inside forward); graphport lifts only objects the module holds, "
                "as torch.export does",
                fix=f"make the object before export and keep it on the module (`self.obj = torch.classes."
                    f"{short.replace('::', '.')}(...)` in __init__), then use `self.obj` in forward")
        fake = self.fake(obj)
        name = "obj_" + target.replace(".", "_")
        node = self.rec.placeholder(name, None)
        node.meta["val"] = CustomObjArgument(node.name, qualified, fake)
        self.lifted[_key(obj)] = node
        return node

    def lift_as(self, obj: torch.ScriptObject, name: str, target: str) -> fx.Node:
        """`obj`'s placeholder made now, named `name`, for the attribute path `target` (a
        program's own custom object input, when its graph is traced again)."""
        self.names[_key(obj)] = target
        self.objects[_key(obj)] = obj
        node = self.node(obj)
        if node.name != name:
            raise InternalError(f"the custom object input {name} was traced again as {node.name}")
        return node

    def fake(self, obj: torch.ScriptObject) -> Any:
        """The fake copy capture computes with (made once per object, so calls that change
        its state, such as a queue's push, are seen by later calls as in eager)."""
        found = self.fakes.get(_key(obj))
        if found is not None:
            return found
        qualified, short = class_name(obj)
        fake_class = _torch.fake_class(qualified)
        if fake_class is None:
            raise UnsupportedFeatureError(
                f"the program calls the custom object {self._label(obj)} of class {short}, which has no fake class: "
                "graphport computes what its methods return without running the object",
                fix=f"register one in Python: `@torch._library.register_fake_class(\"{short}\")` on a class with "
                    "`__obj_unflatten__(cls, flat)` and the methods forward calls, each computing its results' "
                    "shapes")
        if not hasattr(obj, "__obj_flatten__"):
            raise UnsupportedFeatureError(
                f"the custom object {self._label(obj)} of class {short} has no __obj_flatten__ method, from which "
                "its fake class rebuilds a fake copy",
                fix="define `__obj_flatten__` in the C++ class (returning a tuple of (name, value) pairs) and "
                    "register it with `.def(\"__obj_flatten__\", ...)`")
        with _torch.outside_dispatch_modes():
            flat = obj.__obj_flatten__()
        flat = pytree.tree_map_only(torch.Tensor, _meta_copy, flat)
        fake = self.fakes[_key(obj)] = fake_class.__obj_unflatten__(flat)
        return fake

    def _label(self, obj) -> str:
        name = self.names.get(_key(obj))
        return f"'{name}'" if name is not None else "(not held by the module)"

    def input_specs(self) -> dict[str, InputSpec]:
        """The CUSTOM_OBJ input of each object the program used, by placeholder name."""
        return {node.name: InputSpec(InputKind.CUSTOM_OBJ, CustomObjArgument(node.name, node.meta["val"].class_fqn),
                                     self.names[key])
                for key, node in self.lifted.items()}

    def values(self) -> dict[str, torch.ScriptObject]:
        """The lifted objects by attribute path (they join `ep.constants`, as in torch.export)."""
        return {self.names[key]: self.objects[key] for key in self.lifted}


def _meta_copy(t: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")


def capture_call_torchbind(mode, obj, method: str, *args, **kwargs):
    """A method call on a custom object (`self.obj.method(x)`), recorded as torch does:
    `call_torchbind(obj, "method", *args)`, its outputs computed by the fake class."""
    rec = mode.rec
    objects = rec.objects
    obj_node = objects.node(obj) if is_custom_object(obj) else None
    if obj_node is None:
        raise UnsupportedFeatureError(f"call_torchbind was called on a {type(obj).__qualname__}, not a custom object",
                                      fix="call methods of torch.classes objects the module holds")
    fake = objects.fake(obj)
    fake_method = getattr(fake, method, None)
    if not callable(fake_method):
        _, short = class_name(obj)
        raise UnsupportedFeatureError(
            f"the program calls {method}() of the custom object {objects._label(obj)}, and the fake class of {short} "
            f"has no method {method}",
            fix=f"add `def {method}(self, ...)` to the class registered with register_fake_class(\"{short}\"), "
                "computing what the real method returns (tensors of the right shape, dtype and device)")
    meta_args, meta_kwargs = map_args(mode._meta, (args, kwargs))
    val = fake_method(*meta_args, **meta_kwargs)
    node_args, node_kwargs = map_args(rec.graph_arg, ((obj, method, *args), kwargs))
    if rec.effects is not None and rec.effects.applies():
        node, out = rec.effects.record(call_torchbind, node_args, node_kwargs, val, mode._device(args, kwargs))
        first = 1   # with_effects returns the new token first
    else:
        node = rec.node(call_torchbind, node_args, node_kwargs, val)
        rec.user_calls.add(node)
        out, first = rec.wrap(val, node, mode._device(args, kwargs)), 0
    _check_numbers(rec, node, val, first, f"{method}() of the custom object {objects._label(obj)}")
    return out


def _check_numbers(rec, node: fx.Node, val: Any, first: int, what: str) -> None:
    """A Python number a method returned at export (the fake class's answer) is a constant to
    the rest of the program; the real object may answer otherwise at run time (its state
    changed), so the program checks that it answers the same, rather than compute with a
    stale constant."""
    results = tuple(val) if isinstance(val, tuple) else (val,)
    single = not isinstance(val, tuple) and first == 0
    for i, value in enumerate(results):
        if type(value) not in (int, float, bool) or value != value:   # NaN equals nothing
            continue
        returned = node if single else rec.node(operator.getitem, (node, first + i), {}, value)
        same = rec.node(operator.eq, (returned, value), {}, True)
        message = (f"{what} returned {value!r} when the program was exported, which the program uses as a "
                   "constant; at run time it returned another value (the object's state changed)")
        rec.user_calls.add(rec.node(torch.ops.aten._assert_scalar.default, (same, message), {}, None))
