"""Which calls reach outside the graph: output, logging, clocks, random generators, files,
the network, the environment, and methods that change a container in place.

A builtin is known by the object it is bound to (`time` for `time.time`, a `random.Random`
for `random.random`, a file object for `f.write`, a list for `xs.append`); Python-level
functions of the standard library (logging) by their code objects.
"""
from __future__ import annotations

import builtins
import collections
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


def is_logging_call(code) -> bool:
    return code in _LOGGING_CODES


def is_lru_cache(fn) -> bool:
    return isinstance(fn, functools._lru_cache_wrapper)
