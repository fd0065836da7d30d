"""The audit itself: watch the user's Python while capture runs it.

Two of Python's hooks, set for the exporting thread only and restored afterwards:

- the profiler (`sys.setprofile`) sees every call: builtins that reach outside the graph
  (calls.py), logging, and `functools` caches of user functions that gain an entry;
- the tracer (`sys.settrace`) sees user frames only (frames.py): in a code object whose
  bytecode writes (bytecode.py) it is switched to one event per instruction, so a write is
  seen just before it runs, with its target; each line's reads of globals and attributes are
  checked for scalar values the graph bakes in.

A write matters when its target existed before the call (so it outlives it). The objects the
call creates are the ones that entered the cycle collector's youngest generation after the
audit emptied it: those still there, and those a collection moved on meanwhile (a collector
callback notes them as each collection starts; the collector keeps running during export, so
a dict the program built before a long run of operators may have left generation 0 by the
time the program writes into it). Dicts holding only atomic values are not tracked by the
collector; such a dict is taken to predate the call when it is reachable from the program's
globals (classes of the user's included), the inputs or the module.

Inside a module whose forward is not user code (torch's layers, an installed library's
models) both hooks are off: only the user's Python is audited, and a library model costs
nothing. In strict mode an effect is refused before it runs: the error is raised from the
hook, at the instruction or call about to make it.
"""
from __future__ import annotations

import contextlib
import gc
import os
import sys
import threading
import types
from typing import Any, Iterator

import torch

from ..errors import PythonEffectError
from ..source import SourceLocation
from . import report
from .bytecode import CallSite, WriteSite, describe, sites
from .calls import CONTEXT_VARIABLE, ITERATOR, builtin_effect, is_logging_call, is_lru_cache, written_by_call
from .frames import OTHER, USER, frame_kind, is_user_callable, is_user_class, runs_no_user_code, user_caller
from .report import PythonEffect

_MISSING = object()
_SCALARS = (bool, int, float, str)
_REACH_DEPTH, _REACH_LIMIT = 3, 20_000
# a builtin type's methods (`dict.__setitem__`, `ndarray.fill`): binding one runs no user code
_BUILTIN_DESCRIPTORS = (types.WrapperDescriptorType, types.MethodDescriptorType)


class PythonAudit:
    """Effects and baked values found while the program ran; refuses effects when strict."""

    def __init__(self, strict: bool):
        self.strict = strict
        self.findings: list[PythonEffect] = []
        self._seen: set = set()
        self._young: set[int] = set()       # ids of objects the call created (see _note_young)
        self._old: dict[int, Any] = {}      # objects found to predate the call, kept alive so ids stay theirs
        self._roots: tuple = ()
        self._restored: set[int] = set()   # the exported modules and their plain containers
        self._modes: list[bool] = []
        self._thread: int | None = None
        self._cached: dict = {}   # code of a user function behind a functools cache -> the cache

    @property
    def effects(self) -> list[PythonEffect]:
        """The findings strict export refuses (everything but baked values)."""
        return [f for f in self.findings if f.refused_by_strict]

    @contextlib.contextmanager
    def watching(self, fn, roots: tuple) -> Iterator[None]:
        """Audit the Python that runs inside; `roots` are the inputs and the module, from which
        a container that predates the call can be reached."""
        self._roots = roots
        self._thread = threading.get_ident()
        self._restored = _restored_by_export(roots[-1])
        gc.collect(0)   # what is alive now predates the call; generation 0 collects what the call makes
        gc.callbacks.append(self._note_young)
        saved = sys.getprofile(), sys.gettrace()
        pre = torch.nn.modules.module.register_module_forward_pre_hook(self._enter_module)
        post = torch.nn.modules.module.register_module_forward_hook(self._leave_module, always_call=True)
        self._modes = [is_user_callable(fn.forward if isinstance(fn, torch.nn.Module) else fn)]
        self._switch(self._modes[-1])
        try:
            yield
        finally:
            _restore_hooks(saved)
            gc.callbacks.remove(self._note_young)
            pre.remove()
            post.remove()
            self._old.clear()
            self._young.clear()
            self._restored.clear()
            self._roots = ()
        if self.strict and self.effects:   # the program caught the refusal raised at the effect
            raise _refusal(self.effects[0])

    # -- switching the hooks on only in user code ---------------------------------------------

    def _switch(self, on: bool) -> None:
        sys.setprofile(self._profile if on else None)
        sys.settrace(self._trace if on else None)

    def _enter_module(self, module, args) -> None:
        if threading.get_ident() != self._thread:
            return   # module hooks are process-wide; the audit watches the exporting thread only
        self._modes.append(is_user_callable(module.forward))
        self._switch(self._modes[-1])

    def _leave_module(self, module, args, output) -> None:
        if threading.get_ident() != self._thread:
            return
        if len(self._modes) > 1:
            self._modes.pop()
        self._switch(self._modes[-1])

    def pause_for(self, func, args: tuple, kwargs: dict | None) -> tuple | None:
        """Turn both hooks off for a torch call made from watched code when the call cannot run
        user code (frames.runs_no_user_code): everything it runs is torch's and capture's Python,
        in which the hooks find nothing, yet they would be called for each of its function calls
        (most of capture's time, per operator). Returns what `resume` restores, or None."""
        if sys.getprofile() != self._profile or threading.get_ident() != self._thread \
                or not runs_no_user_code(func, args, kwargs):
            return None
        saved = sys.getprofile(), sys.gettrace()
        sys.setprofile(None)
        sys.settrace(None)
        return saved

    @staticmethod
    def resume(saved: tuple) -> None:
        _restore_hooks(saved)

    # -- calls -----------------------------------------------------------------------------------

    def _profile(self, frame, event: str, arg) -> None:
        try:
            self._on_call(frame, event, arg)
        except PythonEffectError:
            raise
        except Exception:   # noqa: BLE001 - an object the audit cannot inspect is not classified;
            pass            # the program must never fail because it was watched

    def _on_call(self, frame, event: str, arg) -> None:
        if event == "c_call":
            where = frame_kind(frame)
            if where == OTHER:
                return
            found = builtin_effect(arg)
            if found is None:
                return
            effect_kind, what, written = found
            if written is not None:
                # a standard-library helper's own containers (re's cache) are its business
                if where != USER or not self._predates(written, frame):
                    return
                name = _name_in(frame, written)
                if name:
                    what = what.replace(f" a {type(written).__name__}", f" the {type(written).__name__} {name}")
                what += ", which existed before the call and outlives it"
            user = user_caller(frame)
            if user is not None:
                restored = written is not None and id(written) in self._restored
                self._found(effect_kind, what, user, restored=restored)
        elif event == "call":
            if is_logging_call(frame.f_code):
                user = user_caller(frame.f_back)
                if user is not None:
                    self._found(report.LOGGING, f"logs through logging.{frame.f_code.co_name}", user)
            elif frame.f_code in self._cached and frame.f_back is not None:
                # the function behind the cache runs: a miss, whose result the cache keeps
                self._found(report.CACHE, f"adds an entry to the functools cache of {frame.f_code.co_name}, "
                                          "which outlives the call: a later call gets the value computed during "
                                          "export", frame.f_back)

    # -- writes and reads ------------------------------------------------------------------------

    def _trace(self, frame, event: str, arg):
        code = frame.f_code
        if frame_kind(frame) != USER:
            return None
        try:
            found = sites(code)
        except Exception:   # noqa: BLE001 - bytecode the simulation cannot follow is not watched
            return None
        if found.empty:
            return None
        if found.writes or found.calls:
            frame.f_trace_opcodes = True
        return self._local

    def _local(self, frame, event: str, arg):
        try:
            self._on_instruction(frame, event)
        except PythonEffectError:
            raise
        except Exception:   # noqa: BLE001 - as in _profile
            pass
        return self._local

    def _on_instruction(self, frame, event: str) -> None:
        if event == "opcode":
            found = sites(frame.f_code)
            site = found.writes.get(frame.f_lasti)
            if site is not None:
                self._write(frame, site)
            callee = found.calls.get(frame.f_lasti)
            if callee is not None:
                self._call(frame, callee)
        elif event == "line":
            reads = sites(frame.f_code).reads.get(frame.f_lineno)
            if reads:
                self._reads(frame, reads)

    def _call(self, frame, site: CallSite) -> None:
        """Calls that change an object in place (calls.written_by_call), judged here, where the
        call's arguments can be read; callables the profiler does not see (extension functions
        such as NumPy's random generators are not builtins); functools caches of user functions."""
        local_values = frame.f_locals
        callee = _evaluate(frame, site.callee, local_values)
        if callee is _MISSING:
            return
        first_expr = site.args[0] if site.args else None
        first = _evaluate(frame, first_expr, local_values) if first_expr is not None else _MISSING
        written = written_by_call(callee, None if first is _MISSING else first)
        if written is not None:
            self._call_write(frame, site, written, first_expr if written[2] is first else None)
            return
        if isinstance(callee, (types.BuiltinFunctionType, types.FunctionType, type)):
            return   # builtins reach the profiler; Python functions are traced themselves
        if is_lru_cache(callee):
            wrapped = getattr(callee, "__wrapped__", None)
            if is_user_callable(wrapped):
                self._cached[wrapped.__code__] = callee
            return
        found = builtin_effect(callee)
        if found is not None and found[2] is None:
            self._found(found[0], found[1], frame)

    def _call_write(self, frame, site: CallSite, written: tuple, target_expr: tuple | None) -> None:
        """A call about to change `target` in place: an effect when the target outlives the call."""
        kind, call, target = written
        on_argument = target_expr is not None
        if target_expr is None and site.callee[0] == "attr":
            target_expr = site.callee[1]   # a method: its object is the callee's base
        if target is None or isinstance(target, torch.Tensor):
            return   # an unknown target; a tensor's changes are the graph's
        shown = describe(target_expr) if target_expr is not None else f"a {type(target).__name__}"
        if kind == report.ATTRIBUTE:
            name_expr = site.args[1 if on_argument else 0] if len(site.args) > int(on_argument) else None
            name = name_expr[1] if name_expr is not None and name_expr[0] == "const" else "..."
            verb = "deletes" if "delattr" in call else "assigns"
            self._attribute_write(frame, target, shown, name, verb)
            return
        call = "calls " + call.replace("{target}", shown)
        namespace = self._namespace(frame, target_expr, target)
        if namespace is not None:
            effect_kind, owner, predates, restored = namespace
            if predates:
                self._found(effect_kind, f"{call}, which changes {owner}", frame, restored=restored)
            return
        if not self._predates(target, frame):
            return
        if kind == ITERATOR:
            self._found(report.ITERATOR, f"{call}, which advances the {type(target).__name__} {shown}: it existed "
                                         "before the call and outlives it, so the next call starts where this one "
                                         "stopped", frame)
        elif kind == CONTEXT_VARIABLE:
            self._found(report.GLOBAL, f"{call}, which sets the context variable {shown}, whose value outlives "
                                       "the call", frame)
        else:
            self._found(report.CONTAINER, f"{call}, which changes {shown}, a {type(target).__name__} that existed "
                                          "before the call and outlives it", frame,
                        restored=id(target) in self._restored)

    def _namespace(self, frame, expr: tuple | None, target) -> tuple[str, str, bool, bool] | None:
        """For a dict that is a namespace, a module's globals (`globals()`, `module.__dict__`) or an
        object's attributes (`vars(obj)`, `obj.__dict__`): (report kind, whose it is, whether its
        owner predates the call, whether export restores it); None for any other object. An
        instance's dict is made when first asked for, so the owner's age is the one that counts."""
        if target is frame.f_globals:
            return report.GLOBAL, f"the globals of module {frame.f_globals.get('__name__', '?')}, which outlive the call", True, False
        base = None
        if expr is not None and expr[0] == "attr" and expr[2] == "__dict__":
            base = expr[1]
        elif expr is not None and expr[0] == "call" and expr[1] == ("global", "vars") and len(expr[2]) == 1:
            base = expr[2][0]
        owner = _evaluate(frame, base, frame.f_locals) if base is not None else _MISSING
        if owner is _MISSING:
            return None
        if isinstance(owner, types.ModuleType):
            return report.GLOBAL, f"the globals of module {owner.__name__}, which outlive the call", True, False
        return (report.ATTRIBUTE, f"the attributes of {describe(base)}, a {type(owner).__name__} that existed "
                                  "before the call and outlives it",
                self._predates(owner, frame), id(owner) in self._restored)

    def _write(self, frame, site: WriteSite) -> None:
        op = site.op.removeprefix("del ")
        verb = "deletes" if site.op.startswith("del ") else "assigns"
        if op == "global":
            module = frame.f_globals.get("__name__", "?")
            self._found(report.GLOBAL, f"{verb} the global {site.name} of module {module}", frame)
            return
        if op == "deref":
            if site.name in frame.f_code.co_cellvars or not self._closure_predates(frame, site.name):
                return
            self._found(report.CLOSURE, f"{verb} {site.name}, a variable of an enclosing function, which outlives "
                                        "the call", frame)
            return
        target = _evaluate(frame, site.target, frame.f_locals) if site.target is not None else _MISSING
        if target is _MISSING or isinstance(target, torch.Tensor):
            return   # an unknown target; a tensor's writes are the graph's
        shown = describe(site.target)
        if op == "attr":
            self._attribute_write(frame, target, shown, site.name, verb)
        elif target is os.environ:
            self._found(report.ENVIRONMENT, f"{verb} os.environ[{site.name!r}]", frame)
        elif (namespace := self._namespace(frame, site.target, target)) is not None:
            effect_kind, owner, predates, restored = namespace
            if predates:
                key = "..." if site.name is None else repr(site.name)
                self._found(effect_kind, f"{verb} {shown}[{key}], in {owner}", frame, restored=restored)
        elif self._predates(target, frame):
            key = "" if site.name is None else repr(site.name)
            self._found(report.CONTAINER, f"{verb} {shown}[{key or '...'}] in a {type(target).__name__} that "
                                          "existed before the call and outlives it", frame,
                        restored=id(target) in self._restored)

    def _attribute_write(self, frame, target, shown: str, name, verb: str) -> None:
        if isinstance(target, types.ModuleType):
            self._found(report.GLOBAL, f"{verb} {shown}.{name}, a global of module {target.__name__}", frame)
        elif isinstance(target, torch.nn.Module):
            if name in target._parameters or name in target._buffers or name in target._modules:
                return   # registered state: the graph carries its changes
            if self._predates(target, frame):
                self._found(report.ATTRIBUTE, f"{verb} {shown}.{name}, a plain attribute of the module "
                                              f"{type(target).__name__} (not a parameter or buffer): eager keeps "
                                              "the change, the exported program does not", frame,
                            restored=id(target) in self._restored)
        elif self._predates(target, frame):
            self._found(report.ATTRIBUTE, f"{verb} {shown}.{name} on a {type(target).__name__} that existed "
                                          "before the call and outlives it", frame)

    def _reads(self, frame, exprs: list[tuple]) -> None:
        local_values = None
        for expr in exprs:
            if expr[0] == "global":
                value = frame.f_globals.get(expr[1], _MISSING)
            else:
                if local_values is None:
                    local_values = frame.f_locals
                owner = _evaluate(frame, expr[1], local_values)
                if owner is _MISSING or isinstance(owner, (type, types.ModuleType, torch.Tensor)) \
                        or not self._predates(owner, frame):
                    continue
                value = _attribute(owner, expr[2])
            if type(value) in _SCALARS:
                self._found(report.BAKED, f"reads {describe(expr)} = {value!r}, which the graph keeps as a "
                                          "constant", frame, key=describe(expr))

    # -- which objects predate the call ----------------------------------------------------------

    def _note_young(self, phase: str, info: dict) -> None:
        """Collector callback: a collection is about to move what generation 0 holds (all of it
        made during the call) to an older generation, so its ids are noted as the call's. An id
        noted stays the call's: its object may die, but whatever takes its address later is
        made later still."""
        if phase == "start":
            self._young.update(map(id, gc.get_objects(generation=0)))

    def _predates(self, obj, frame) -> bool:
        """Whether `obj` existed before the call (so a change to it outlives the call)."""
        if id(obj) in self._old:
            return True
        if id(obj) in self._young:
            return False
        if gc.is_tracked(obj):
            young = any(o is obj for o in gc.get_objects(generation=0))
        else:
            young = not _reachable(obj, (frame.f_globals, *self._roots))
        if not young:
            self._old[id(obj)] = obj
        return not young

    def _closure_predates(self, frame, name: str) -> bool:
        """Whether the cell behind free variable `name` of the running function predates the call."""
        index = frame.f_code.co_freevars.index(name)
        for fn in gc.get_referrers(frame.f_code):
            if isinstance(fn, types.FunctionType) and fn.__code__ is frame.f_code and fn.__closure__ \
                    and self._predates(fn.__closure__[index], frame):
                return True
        return False

    def baked(self, frame, what: str, key: str) -> None:
        """A value capture answered for the program at `frame` and the graph keeps (reported
        with the program's baked reads; capture/tensor_state.py)."""
        self._found(report.BAKED, what, frame, key=key)

    def _found(self, effect_kind: str, what: str, frame, key: str = "", restored: bool = False) -> None:
        code = frame.f_code
        location = SourceLocation(code.co_filename, frame.f_lineno, code.co_name)
        seen = (location, key if effect_kind == report.BAKED else "effect")
        if seen in self._seen:
            return
        self._seen.add(seen)
        finding = PythonEffect(effect_kind, what, location, restored)
        self.findings.append(finding)
        if self.strict and finding.refused_by_strict:
            raise _refusal(finding)


def _restored_by_export(root) -> set[int]:
    """Ids of what export itself restores after a capture (capture/environment.py's
    ModuleSnapshot): the modules' plain attributes, and their lists, dicts and sets in place."""
    if not isinstance(root, torch.nn.Module):
        return set()
    found = set()
    for module in root.modules():
        found.add(id(module))
        found.update(id(v) for v in vars(module).values() if type(v) in (list, dict, set))
    return found


def _name_in(frame, obj) -> str:
    """The name the frame's locals or globals give `obj`, else ""."""
    for names in (frame.f_locals, frame.f_globals):
        for name, value in names.items():
            if value is obj:
                return name
    return ""


def _refusal(effect: PythonEffect) -> PythonEffectError:
    return PythonEffectError(f"strict export refuses a Python effect the graph cannot carry ({effect.kind}): the "
                             f"program {effect.what}", location=effect.location, fix=effect.fix, effect=effect)


def _evaluate(frame, expr: tuple, local_values: dict):
    """The value of a load chain in `frame`, read without running user code (no properties)."""
    k = expr[0]
    if k in ("fast", "deref"):
        return local_values.get(expr[1], _MISSING)
    if k == "global":
        value = frame.f_globals.get(expr[1], _MISSING)
        return frame.f_builtins.get(expr[1], _MISSING) if value is _MISSING else value
    if k == "const":
        return expr[1]
    if k == "call":   # a namespace: `globals()`, `vars(obj)` (bytecode.py records no other call)
        if expr[1] == ("global", "globals") and frame.f_builtins.get("globals") is globals \
                and "globals" not in frame.f_globals:
            return frame.f_globals
        if expr[1] == ("global", "vars") and frame.f_builtins.get("vars") is vars and "vars" not in frame.f_globals:
            owner = _evaluate(frame, expr[2][0], local_values)
            return _attribute(owner, "__dict__") if owner is not _MISSING else _MISSING
        return _MISSING
    base = _evaluate(frame, expr[1], local_values)
    if base is _MISSING:
        return _MISSING
    if k == "attr":
        return _attribute(base, expr[2])
    if type(base) in (dict, list, tuple):
        key = _evaluate(frame, expr[2], local_values)
        try:
            return base[key]
        except Exception:
            return _MISSING
    return _MISSING


def _attribute(obj, name: str):
    """`obj.name` where it is stored data (instance dict, slot, registered module state, plain
    class attribute); _MISSING where reading it would run code (a property)."""
    try:
        own = object.__getattribute__(obj, "__dict__")
    except AttributeError:
        own = None
    if name == "__dict__":
        return own if isinstance(own, (dict, types.MappingProxyType)) else _MISSING
    if isinstance(own, dict) and name in own:
        return own[name]
    if isinstance(own, types.MappingProxyType) and name in own:   # a class's own attribute
        value = own[name]
        unbound = isinstance(value, (types.FunctionType, *_BUILTIN_DESCRIPTORS))
        return value if unbound or not hasattr(type(value), "__get__") else _MISSING
    if isinstance(obj, torch.nn.Module):
        for table in (obj._parameters, obj._buffers, obj._modules):
            if name in table:
                return table[name]
    for klass in type(obj).__mro__:
        if name in vars(klass):
            value = vars(klass)[name]
            if isinstance(value, (types.MemberDescriptorType, *_BUILTIN_DESCRIPTORS)):   # runs no Python
                try:
                    return value.__get__(obj, type(obj))
                except AttributeError:
                    return _MISSING
            return _MISSING if hasattr(type(value), "__get__") else value
    return _MISSING


def _reachable(target, roots: tuple) -> bool:
    """Whether `target` is reachable from `roots` through containers and instance dicts (bounded)."""
    seen: set[int] = set()
    layer = list(roots)
    for _ in range(_REACH_DEPTH + 1):
        following = []
        for obj in layer:
            if obj is target:
                return True
            if id(obj) in seen or isinstance(obj, (str, bytes, int, float, torch.Tensor, types.ModuleType,
                                                   types.FunctionType)) or len(seen) > _REACH_LIMIT:
                continue
            if isinstance(obj, type) and not is_user_class(obj):
                continue
            seen.add(id(obj))
            if isinstance(obj, type):   # a class of the user's: its class attributes (`Cls.registry`)
                following += vars(obj).values()
            elif isinstance(obj, dict):
                following += obj.values()
            elif isinstance(obj, (list, tuple, set, frozenset)):
                following += obj
            elif isinstance(obj, torch.nn.Module):
                following += [v for k, v in vars(obj).items() if not k.startswith("_")]
                following += obj._modules.values()
            elif hasattr(obj, "__dict__") and not callable(obj):
                following += vars(obj).values()
        layer = following
    return False


def _restore_hooks(saved: tuple) -> None:
    """Put back the profile and trace hooks found on entry. A C-level profiler (cProfile's
    `Profile`, which `sys.getprofile()` returns as an object that is not a Python hook) is
    re-enabled through its own `enable()`: handed to `sys.setprofile` it would be called as a
    Python function at the next event and raise `TypeError: 'Profile' object is not callable`."""
    profile, trace = saved
    if profile is not None and not callable(profile) and callable(getattr(profile, "enable", None)):
        sys.setprofile(None)
        profile.enable()
    else:
        sys.setprofile(profile)
    sys.settrace(trace)

