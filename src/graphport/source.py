"""Where in the user's program are we? Stack walking shared by capture and errors.

A frame is "user code" unless it lives inside torch or graphport itself. Library code
such as transformers counts as user code: it is what the user asked us to capture.
"""
from __future__ import annotations

import functools
import importlib.util
import linecache
import os
import sys
from dataclasses import dataclass
from types import CodeType, FrameType
from typing import Callable

# torch's directory, found without importing torch, so that errors (and with them the
# command line's argument checks) load in milliseconds
_TORCH_DIR = os.path.dirname(importlib.util.find_spec("torch").origin)

_INTERNAL_DIRS = (
    _TORCH_DIR + os.sep,
    os.path.dirname(os.path.abspath(__file__)) + os.sep,
    os.path.dirname(os.__file__) + os.sep + "contextlib.py",
)


@dataclass(frozen=True)
class SourceLocation:
    filename: str
    lineno: int
    function: str

    @property
    def code(self) -> str:
        return linecache.getline(self.filename, self.lineno).strip()

    def __str__(self) -> str:
        return f"{self.filename}:{self.lineno} in {self.function}"

    def describe(self) -> str:
        """`file:line in fn` followed by the line of code, for error messages."""
        code = self.code
        return f"{self}\n    {code}" if code else str(self)


def _is_internal(filename: str) -> bool:
    return filename.startswith(_INTERNAL_DIRS) or filename.startswith("<frozen")


# where torch turns `bool(sym_bool)` into a question to the shape environment
_SYMBOLIC_BOOL = (os.path.join(_TORCH_DIR, "__init__.py"), os.path.join(_TORCH_DIR, "fx", "experimental", "sym_node.py"))
_GRAPHPORT_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def asked_by_program(passing: tuple = _SYMBOLIC_BOOL) -> bool:
    """Whether the question about sizes being answered now comes from the program's own
    Python (the user's code or a library's: `if h == w:`), not from torch's implementation of
    an operator (a shape check inside a kernel): the innermost frame past graphport's own and
    torch's `bool(SymBool)` machinery (`passing`)."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not (filename.startswith(_GRAPHPORT_DIR) or filename in passing or filename.startswith("<frozen")):
            return not filename.startswith(_TORCH_DIR + os.sep)
        frame = frame.f_back
    return False


# where torch turns `min(a, b)` on sizes into a size operation (torch.sym_min, through a torch
# function mode when one is active)
SYMBOLIC_EXTREMA = (*_SYMBOLIC_BOOL, os.path.join(_TORCH_DIR, "overrides.py"))


def user_frames(limit: int = 64) -> list[FrameType]:
    """User frames on the current stack, outermost first."""
    frames = []
    frame = sys._getframe(1)
    while frame is not None and len(frames) < limit:
        if not _is_internal(frame.f_code.co_filename):
            frames.append(frame)
        frame = frame.f_back
    frames.reverse()
    return frames


def innermost_user_location() -> SourceLocation | None:
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not _is_internal(filename):
            return SourceLocation(filename, frame.f_lineno, frame.f_code.co_name)
        frame = frame.f_back
    return None


_TORCH_NN = os.path.join(_TORCH_DIR, "nn") + os.sep


# Capture walks the stack once per recorded node, through the same few hundred frames:
# each code object's kind and each (code, line)'s location are worked out once. Bounded,
# because code objects made at run time (exec, fx) would otherwise be kept alive.
_USER, _INTERNAL, _INTERNAL_NN = 0, 1, 2
_CACHE_LIMIT = 50_000
_kinds: dict[CodeType, int] = {}
_locations: dict[tuple[CodeType, int], SourceLocation] = {}


def _kind(code: CodeType) -> int:
    kind = _kinds.get(code)
    if kind is None:
        if len(_kinds) >= _CACHE_LIMIT:
            _kinds.clear()
        filename = code.co_filename
        kind = _kinds[code] = (_USER if not _is_internal(filename)
                               else _INTERNAL_NN if filename.startswith(_TORCH_NN) else _INTERNAL)
    return kind


def _location(code: CodeType, lineno: int) -> SourceLocation:
    location = _locations.get((code, lineno))
    if location is None:
        if len(_locations) >= _CACHE_LIMIT:
            _locations.clear()
        location = _locations[(code, lineno)] = SourceLocation(code.co_filename, lineno, code.co_name)
    return location


def user_stack(stop_at: FrameType | None = None) -> tuple[SourceLocation, ...]:
    """User locations from `stop_at` (the capture's entry frame, exclusive) inwards.

    When the captured program is torch's own code (exporting `nn.Linear` itself), the
    innermost torch.nn frame stands in, so every node still points at a source line.
    """
    locations = []
    fallback = None
    kinds = _kinds
    frame = sys._getframe(1)
    while frame is not None and frame is not stop_at:
        code = frame.f_code
        kind = kinds.get(code)   # the cache read inline: this loop runs for every frame of every node
        if kind is None:
            kind = _kind(code)
        if kind == _USER:
            locations.append(_location(code, frame.f_lineno))
        elif fallback is None and kind == _INTERNAL_NN:
            fallback = _location(code, frame.f_lineno)
        frame = frame.f_back
    if not locations and fallback is not None:
        return (fallback,)
    locations.reverse()
    return tuple(locations)


def format_stack_trace(stack: tuple[SourceLocation, ...]) -> str:
    """The `stack_trace` node metadata string, in the traceback layout torch tools parse."""
    return "\n".join(f'  File "{loc.filename}", line {loc.lineno}, in {loc.function}\n    {loc.code}' for loc in stack)


def stack_trace_formatter() -> Callable[[tuple[SourceLocation, ...]], str]:
    """format_stack_trace remembering its answers, for one graph's nodes: a layer's nodes
    repeat the same few stacks (kept per graph, so a source file edited between two exports
    is read again)."""
    return functools.lru_cache(maxsize=None)(format_stack_trace)


def location_in_traceback(tb) -> SourceLocation | None:
    """The innermost user frame of an exception's traceback."""
    found = None
    while tb is not None:
        code = tb.tb_frame.f_code
        if not _is_internal(code.co_filename):
            found = SourceLocation(code.co_filename, tb.tb_lineno, code.co_name)
        tb = tb.tb_next
    return found
