"""Which calls reach outside the graph: output, logging, clocks, random generators, files,
the network, the environment, and calls that change an object in place.

A builtin is known by the object it is bound to (`time` for `time.time`, a `random.Random`
for `random.random`, a file object for `f.write`, a list for `xs.append`); Python-level
functions of the standard library (logging) by their code objects.

A call that writes (`written_by_call`) names the object it changes: the method's own object
(`xs.append`, `TABLE.__setitem__`, `array.fill`, `var.set`), or the first argument of a
function that changes its argument (`operator.setitem`, `dict.__setitem__`, `heapq.heappush`,
`bisect.insort`, `numpy.copyto`, `next`). Whether that object outlives the call is the
audit's question (watch.py), not this module's.
"""
from __future__ import annotations

import builtins
import collections
import contextvars
import functools
import io
import logging
import random
import socket
import sys
import types

from . import report

_BUILTINS = {id(builtins.print): (report.OUTPUT, "prints"), id(builtins.input): (report.IO, "reads standard input"),
             id(builtins.open): (report.IO, "opens a file"), id(io.open): (report.IO, "opens a file"),
             id(builtins.breakpoint): (report.IO, "enters the debugger")}
_MODULES = {"time": report.CLOCK, "posix": report.IO, "nt": report.IO, "_socket": report.NETWORK,
            "_random": report.RANDOM, "select": report.NETWORK}
_ENV_CALLS = {"putenv", "unsetenv"}
_MUTATORS = {"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse", "update", "setdefault",
             "popitem", "add", "discard", "difference_update", "intersection_update",
             "symmetric_difference_update", "appendleft", "extendleft", "popleft", "rotate", "__setitem__",
             "__delitem__", "__iadd__", "__imul__", "move_to_end"}
_CONTAINERS = (list, dict, set, bytearray, collections.deque)
_IN_PLACE_OPERATORS = {"__iadd__", "__isub__", "__imul__", "__imatmul__", "__itruediv__", "__ifloordiv__",
                       "__imod__", "__ipow__", "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__",
                       "__iconcat__"}
_ATTRIBUTE_DUNDERS = {"__setattr__", "__delattr__"}
_ITEM_DUNDERS = {"__setitem__", "__delitem__"} | _IN_PLACE_OPERATORS
# functions that change their first argument, by module and name (the C modules behind the stdlib's)
_ARGUMENT_WRITERS = {
    "_operator": {"setitem", "delitem"} | {name.strip("_") for name in _IN_PLACE_OPERATORS},
    "_bisect": {"insort", "insort_left", "insort_right"},
    "_heapq": {"heappush", "heappop", "heapify", "heapreplace", "heappushpop", "_heappop_max", "_heapify_max",
               "_heapreplace_max"},
}
_NUMPY_ARGUMENT_WRITERS = {"copyto", "put", "place", "putmask", "fill_diagonal", "put_along_axis"}
_NUMPY_METHODS = {"fill", "sort", "put", "resize", "partition", "setfield", "itemset"} | _ITEM_DUNDERS
CONTEXT_VARIABLE, ITERATOR = "context variable", "iterator"
_LOGGING_CODES = frozenset(
    getattr(owner, name).__code__
    for owner in (logging.Logger, logging)
    for name in ("debug", "info", "warning", "warn", "error", "exception", "critical", "fatal", "log")
    if isinstance(getattr(owner, name, None), types.FunctionType))


def builtin_effect(fn) -> tuple[str, str, object] | None:
    """(kind, what, written object or None) for a builtin call that is an effect, else None."""
    found = _BUILTINS.get(id(fn))
    if found is not None and fn in (builtins.print, builtins.input, builtins.open, io.open, builtins.breakpoint):
        return (*found, None)
    owner = getattr(fn, "__self__", None)
    name = getattr(fn, "__name__", "?")
    if owner is None:
        return None
    if isinstance(owner, types.ModuleType):
        module = owner.__name__
        if module in ("posix", "nt") and name in _ENV_CALLS:
            return report.ENVIRONMENT, f"changes the process environment (os.{name})", None
        kind = _MODULES.get(module)
        if kind is None:
            return None
        shown = "os" if module in ("posix", "nt") else module.lstrip("_")
        return kind, f"calls {shown}.{name}", None
    if isinstance(owner, _CONTAINERS) and name in _MUTATORS:
        return report.CONTAINER, f"calls .{name} on a {type(owner).__name__}", owner
    if isinstance(owner, random.Random):
        return report.RANDOM, f"draws from Python's random generator (random.{name})", None
    # identity, not `in`: `==` would run the owner's own comparison (a tensor's is an operator call)
    standard = owner is sys.stdout or owner is sys.stderr
    if standard or isinstance(owner, io.IOBase):
        what = "writes to" if "write" in name or name == "flush" else "uses"
        stream = "standard output" if owner is sys.stdout else "standard error" if owner is sys.stderr else "a file"
        return (report.OUTPUT if standard else report.IO), f"{what} {stream} (.{name})", None
    if isinstance(owner, socket.socket):
        return report.NETWORK, f"uses a socket (.{name})", None
    module = type(owner).__module__ or ""
    if module.startswith("numpy.random"):
        return report.RANDOM, f"draws from NumPy's random generator (numpy.random.{name})", None
    return None


def written_by_call(fn, first) -> tuple[str, object, object] | None:
    """(what kind of object is changed, the call as source text with `{target}` standing for the
    changed object, the object) for a call to `fn` that changes an object in place, else None;
    `first` is the call's first positional argument (None when not known). The kinds:
    report.CONTAINER, report.ATTRIBUTE, CONTEXT_VARIABLE, ITERATOR."""
    name = getattr(fn, "__name__", None)
    if not isinstance(name, str):
        return None
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, types.ModuleType) or owner is None:
        module = owner.__name__ if owner is not None else getattr(fn, "__module__", None)
        if fn is builtins.next:
            return (ITERATOR, "next({target})", first) if _is_iterator(first) else None
        if name in _ARGUMENT_WRITERS.get(module, ()):
            if module == "_operator" and name.startswith("i") and not _mutable(first):
                return None   # `operator.iadd(n, 1)` on an int makes a new value
            return report.CONTAINER, f"{module.lstrip('_')}.{name}({{target}}, ...)", first
        if module == "numpy" and name in _NUMPY_ARGUMENT_WRITERS and _is_ndarray(first):
            return report.CONTAINER, f"numpy.{name}({{target}}, ...)", first
        if isinstance(fn, (types.WrapperDescriptorType, types.MethodDescriptorType)) and first is not None:
            return _method_write(name, first, f"{fn.__objclass__.__name__}.{name}({{target}}, ...)")
        return None
    return _method_write(name, owner, f"{{target}}.{name}(...)")


def _method_write(name: str, obj, how: str) -> tuple[str, object, object] | None:
    """A builtin method `name` called on `obj` (bound or unbound), where it changes `obj`."""
    if name in _ATTRIBUTE_DUNDERS:
        return report.ATTRIBUTE, how, obj
    if isinstance(obj, _CONTAINERS) and (name in _MUTATORS or name in _ITEM_DUNDERS):
        return report.CONTAINER, how, obj
    if _is_ndarray(obj) and name in _NUMPY_METHODS:
        return report.CONTAINER, how, obj
    if name == "set" and isinstance(obj, contextvars.ContextVar):
        return CONTEXT_VARIABLE, how, obj
    if name in ("__next__", "send", "throw") and _is_iterator(obj):
        return ITERATOR, how, obj
    return None


def _mutable(obj) -> bool:
    return isinstance(obj, _CONTAINERS) or _is_ndarray(obj)


def _is_ndarray(obj) -> bool:
    numpy = sys.modules.get("numpy")   # only a program that imported NumPy can hold an array
    return numpy is not None and isinstance(obj, numpy.ndarray)


def _is_iterator(obj) -> bool:
    """An iterator or generator (whose `next` changes its position), not a container."""
    return obj is not None and hasattr(type(obj), "__next__") and not isinstance(obj, type)


def is_logging_call(code) -> bool:
    return code in _LOGGING_CODES


def is_lru_cache(fn) -> bool:
    return isinstance(fn, functools._lru_cache_wrapper)
