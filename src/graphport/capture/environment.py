"""The capture environment: the process-wide changes capture needs, in one place.

While a program is captured, some process-wide state must differ from normal:
`torch.compiler.is_exporting()` / `is_compiling()` answer True (libraries pick traceable
code paths on them), builtin `max`/`min` keep symbolic sizes symbolic, control-flow
operators reach graphport instead of torch.compile, and global module hooks track the
module stack. `capture_environment` enters all of it as one context and restores all of
it on every exit path. The captured module itself is handled next to it, by two contexts
of its own: its parameters and buffers are swapped for tracers (state.py), and
`ModuleSnapshot` puts back the plain attributes forward changed. The capture mode's rules
for higher-order operators are registered once per process; they only apply under it.

Captures hold one process-wide re-entrant lock: the state they change is global, so two
threads exporting at once take turns, and a capture started inside another (re-entry on
the same thread) nests and restores in order.
"""
from __future__ import annotations

import builtins
import collections
import contextlib
import functools
import threading
from typing import Callable, Iterator

import torch

from .. import _torch
from ..errors import UnsupportedFeatureError

_LOCK = threading.RLock()
_active = threading.local()   # .depth: captures running on this thread


def capturing() -> bool:
    """Whether this thread is inside a graphport capture."""
    return getattr(_active, "depth", 0) > 0


@contextlib.contextmanager
def capture_environment(module_stack_hooks: tuple[Callable, Callable] | None, symbolic: bool,
                        autograd: bool = False) -> Iterator[None]:
    """Enter everything capture changes outside itself; restore it all on exit.

    `module_stack_hooks` is (pre, post) forward hooks that track the running module;
    `symbolic` enables torch's Python meta kernels; builtin max/min/divmod of symbolic sizes
    stay symbolic in every capture;
    `autograd` lets autograd record the calls on tracers that require grad (the joint
    forward-backward replay), instead of dispatching below it.
    """
    with _LOCK, contextlib.ExitStack() as stack:
        _active.depth = getattr(_active, "depth", 0) + 1
        stack.callback(_leave)
        stack.enter_context(_compiler_flags())
        stack.enter_context(_control_flow_entry())
        stack.enter_context(_custom_object_methods())
        if module_stack_hooks is not None:
            stack.enter_context(_global_module_hooks(*module_stack_hooks))
        if symbolic:
            # torch's Python meta kernels and references handle symbolic sizes; many C++ ones do not
            stack.enter_context(_torch.enable_python_dispatcher())
        # sizes are symbolic in a static capture too where they depend on tensor values (nonzero, masks)
        stack.enter_context(_symbolic_min_max())
        stack.enter_context(_symbolic_divmod())
        if not autograd:
            stack.enter_context(_torch.below_autograd())
        yield


def _leave() -> None:
    _active.depth -= 1


@contextlib.contextmanager
def _compiler_flags():
    """torch.compiler.is_exporting() / is_compiling() answer True while we capture."""
    saved = _torch.compiler_flags()
    _torch.set_compiler_flags(True, True)
    try:
        yield
    finally:
        _torch.set_compiler_flags(*saved)


@contextlib.contextmanager
def _global_module_hooks(pre: Callable, post: Callable):
    pre_handle = torch.nn.modules.module.register_module_forward_pre_hook(pre)
    post_handle = torch.nn.modules.module.register_module_forward_hook(post, always_call=True)
    try:
        yield
    finally:
        pre_handle.remove()
        post_handle.remove()


@contextlib.contextmanager
def _symbolic_min_max():
    """`max(x.shape[0], 3)` keeps the size symbolic (torch.sym_max) instead of guarding on a
    comparison, as torch.export's non-strict mode does. Calls without graphport's symbolic
    values (any other thread's) behave exactly as the builtins."""
    from .sizes import is_sym
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
def _symbolic_divmod():
    """`divmod(x.shape[0], 3)` is `(n // 3, n % 3)`, as Python defines it: torch's symbolic
    values have no `__divmod__`, so the builtin would raise a TypeError on them. Calls
    without symbolic values behave exactly as the builtin."""
    from .sizes import is_sym
    real_divmod = builtins.divmod

    def divmod_(a, b):
        if is_sym(a) or is_sym(b):
            return a // b, a % b
        return real_divmod(a, b)

    builtins.divmod = divmod_
    try:
        yield
    finally:
        builtins.divmod = real_divmod


# -- control-flow operators ------------------------------------------------------------------
#
# However the user spells it (torch.cond, `from torch import cond`,
# functorch.experimental.control_flow.cond, torch.ops.higher_order.cond), a control-flow
# call reaches its higher-order operator; outside torch.compile the Python entry points
# first hand the call to torch.compile through one funnel. During capture the funnel calls
# the operator directly, and the operator dispatches to the capture mode's rule for it.

@contextlib.contextmanager
def _control_flow_entry():
    module = _torch.hop_entry_module()
    real = module._hop_compile_and_call

    def call_operator(fn, args, kwargs=None):
        if not capturing():
            return real(fn, args, kwargs)
        return fn(*args, **(kwargs or {}))

    module._hop_compile_and_call = call_operator
    try:
        yield
    finally:
        module._hop_compile_and_call = real


@contextlib.contextmanager
def _custom_object_methods():
    """A method call on a TorchBind object (`self.obj.push(x)`) made while this thread
    captures reaches torch's `call_torchbind` operator, and through it the capture mode's
    rule (custom_objects.py), as under torch.export, instead of running the object's C++ code
    on tracers. Calls outside a capture, on any thread, run the method as before."""
    real = torch.ScriptMethod.__call__

    def call(method, *args, **kwargs):
        owner = method.raw_owner
        if capturing() and isinstance(owner, torch.ScriptObject):
            return torch.ops.higher_order.call_torchbind(owner, method.name, *args, **kwargs)
        return real(method, *args, **kwargs)

    torch.ScriptMethod.__call__ = call
    try:
        yield
    finally:
        torch.ScriptMethod.__call__ = real


def refuse_higher_order_operator(name: str):
    """The capture rule for a higher-order operator graphport cannot capture yet."""
    def rule(mode, *args, **kwargs):
        raise UnsupportedFeatureError(
            f"the program calls torch's higher-order operator '{name}' (torch.cond, map, while_loop, scan and "
            "friends), which graphport cannot capture yet",
            fix="replace a data-dependent branch with torch.where(pred, a, b) computing both sides, or unroll "
                "the loop in Python over a static count")
    return rule


def register_higher_order_rules(mode_type: type, rules: dict[str, Callable]) -> None:
    """Route every higher-order operator called under `mode_type` to its rule (or a refusal).

    torch creates operators as their modules are imported, so this runs at each capture;
    registering is idempotent and only affects dispatch under graphport's own mode."""
    for op in _torch.higher_order_operators():
        if mode_type not in op.python_key_table:
            op.py_impl(mode_type)(rules.get(op.name(), refuse_higher_order_operator(op.name())))


# -- the module, as the capture found it -------------------------------------------------------

class ModuleSnapshot:
    """Plain Python attributes of every submodule, restored after capture.

    forward may change them (`self.calls += 1`, `self.cache.append(x)`); export must leave
    the model exactly as it found it. Lists, dicts and sets are restored in place, so
    objects the user holds keep their identity; so are ordered dicts, which hold a module's
    hooks: a forward that registers hooks on its first call and sets a flag saying so
    (transformers' output capturing) must find neither after export, or its next call
    registers them a second time."""

    def __init__(self, root: torch.nn.Module):
        self.saved = []
        for _, mod in root.named_modules(remove_duplicate=True):
            attrs = dict(vars(mod))
            # an exact list, dict, set or OrderedDict copies itself (copy.copy goes through
            # __reduce_ex__: most of this snapshot's time on deep models, whose modules hold
            # ten hook dicts each); an empty one is remembered as empty
            containers = {k: v.copy() if v else _EMPTY for k, v in attrs.items() if type(v) in _CONTAINERS}
            self.saved.append((mod, attrs, containers))

    def restore(self) -> None:
        for mod, attrs, containers in self.saved:
            current = vars(mod)
            for key in [k for k in current if k not in attrs]:
                del current[key]
            for key, value in attrs.items():
                if current.get(key, _MISSING) is not value:
                    current[key] = value
                if key in containers:
                    _restore_container(value, containers[key])


_MISSING = object()
_EMPTY = object()   # a container that was empty
_CONTAINERS = (list, dict, set, collections.OrderedDict)


def _restore_container(target, saved) -> None:
    if saved is _EMPTY:
        if target:
            target.clear()
        return
    if isinstance(target, list):
        target[:] = saved
    else:
        target.clear()
        target.update(saved)
