"""Whose code is running: the user's (audited), a library's, or the machinery's (not audited).

The audit looks at the Python the user wrote: files that are not part of torch, graphport,
Python's standard library, or an installed package (site-packages). Installed libraries
such as transformers are trusted to keep only bookkeeping of their own in forward (caches,
`logger.warning_once` registries, hook dictionaries): their frames are not audited, and an
effect they make is not attributed to the user. Standard-library frames are transparent:
`random.randint` or `logging.info` called from user code is the user's effect, found at the
user's line.
"""
from __future__ import annotations

import os
import sys
import sysconfig
import types
from types import CodeType, FrameType

import torch

USER, STDLIB, OTHER, GENERATED = 0, 1, 2, 3

_STDLIB_DIRS = tuple({os.path.realpath(sysconfig.get_paths()[k]) + os.sep for k in ("stdlib", "platstdlib")}
                     | {os.path.dirname(os.__file__) + os.sep})
_SITE_DIRS = tuple({os.path.realpath(sysconfig.get_paths()[k]) + os.sep for k in ("purelib", "platlib")}
                   | {os.path.dirname(os.path.dirname(torch.__file__)) + os.sep})
_OWN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep

# Keyed by identity: code objects compare equal across files (equality ignores co_filename),
# so a user's function identical to a library's must not share its entry. Each entry holds its
# code object, so no other code can take its id while the entry lives.
_kinds: dict[int, tuple[CodeType, int]] = {}
_CACHE_LIMIT = 50_000


def kind(code: CodeType) -> int:
    """USER, STDLIB, OTHER (torch, graphport, an installed library), or GENERATED: code made
    at run time (`<string>`: dataclasses' methods, exec), whose owner is its caller's."""
    found = _kinds.get(id(code))
    if found is None:
        if len(_kinds) >= _CACHE_LIMIT:
            _kinds.clear()
        found = _kinds[id(code)] = (code, _classify(code.co_filename))
    return found[1]


def _classify(filename: str) -> int:
    if filename.startswith("<frozen"):
        return STDLIB
    if filename.startswith("<"):
        return GENERATED
    if filename.startswith((_OWN_DIR, _TORCH_DIR)):
        return OTHER
    path = os.path.realpath(filename) if os.path.isabs(filename) else filename
    if path.startswith(_SITE_DIRS) or filename.startswith(_SITE_DIRS):
        return OTHER
    if path.startswith(_STDLIB_DIRS) or filename.startswith(_STDLIB_DIRS):
        # warnings.warn shows its message through the standard library: a diagnostic, not an effect
        return OTHER if os.path.basename(path) == "warnings.py" else STDLIB
    return USER


def frame_kind(frame: FrameType) -> int:
    """USER, STDLIB or OTHER for a running frame: generated code counts as its caller's."""
    k = kind(frame.f_code)
    while k == GENERATED:
        frame = frame.f_back
        if frame is None:
            return USER
        k = kind(frame.f_code)
    return k


def user_caller(frame: FrameType | None) -> FrameType | None:
    """The user frame that `frame` works for: itself if it is user code, the first user frame
    above a run of standard-library frames, None if a library or torch frame comes first."""
    while frame is not None:
        k = frame_kind(frame)
        if k == USER:
            return frame
        if k == OTHER:
            return None
        frame = frame.f_back
    return None


def is_user_callable(fn) -> bool:
    """Whether calling `fn` (a function or an nn.Module's forward) runs user code."""
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    return code is not None and kind(code) in (USER, GENERATED)


# Callables implemented in C (torch's operators and Tensor methods): they run no Python of their own.
_C_CALLABLES = (types.BuiltinFunctionType, types.MethodDescriptorType, types.WrapperDescriptorType,
                types.MethodWrapperType, types.ClassMethodDescriptorType)
# Values whose use by torch's own code cannot call back into Python the user wrote.
_INERT = frozenset({type(None), bool, int, float, complex, str, torch.dtype, torch.device, torch.layout,
                    torch.memory_format, torch.Size, torch.SymInt, torch.SymFloat, torch.SymBool, type(Ellipsis)})
_class_kinds: dict[type, int] = {}


def runs_no_user_code(func, args: tuple, kwargs: dict | None) -> bool:
    """Whether calling `func(*args, **kwargs)` cannot run user code: `func` is implemented in C
    or in torch's, graphport's or an installed library's Python, and every argument is a plain
    value, a tensor of a class defined outside the user's files, or a tuple, list or dict of
    those. A callable, a module or any other object among the arguments (torch.cond's
    branches, an autograd.Function, a user's tensor subclass, an object with `__index__`)
    says no."""
    if not isinstance(func, _C_CALLABLES):
        code = getattr(func, "__code__", None)
        if type(func) is not types.FunctionType or code is None or kind(code) != OTHER:
            return False
    return _inert(args) and (not kwargs or _inert(kwargs))


def _inert(value) -> bool:
    t = type(value)
    if t in _INERT:
        return True
    if t is tuple or t is list or t is dict:
        for v in value.values() if t is dict else value:
            if type(v) not in _INERT and not _inert(v):
                return False
        return True
    if t is slice:
        return _inert(value.start) and _inert(value.stop) and _inert(value.step)
    if isinstance(value, torch.Tensor):
        return _class_kind(t) == OTHER
    return False


def _class_kind(cls: type) -> int:
    """USER or OTHER for a class, from the file of the module defining it (cached per class)."""
    found = _class_kinds.get(cls)
    if found is None:
        filename = getattr(sys.modules.get(cls.__module__), "__file__", None)
        found = _class_kinds[cls] = OTHER if filename and _classify(filename) == OTHER else USER
    return found


def is_user_class(cls: type) -> bool:
    """Whether `cls` is defined in a file of the user's (not a builtin, standard-library or
    installed one): its class attributes are the user's state, which the audit searches."""
    filename = getattr(sys.modules.get(getattr(cls, "__module__", None)), "__file__", None)
    return bool(filename) and _classify(filename) == USER
