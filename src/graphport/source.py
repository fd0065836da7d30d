"""Where in the user's program are we? Stack walking shared by capture and errors.

A frame is "user code" unless it lives inside torch or graphport itself. Library code
such as transformers counts as user code: it is what the user asked us to capture.
"""
from __future__ import annotations

import functools
import importlib.util
import inspect
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
# because code objects made at run time (exec, fx) would otherwise be kept alive. Keyed by
# the code object's identity: code objects compare equal across files (equality ignores
# co_filename), so two identical functions in two files must not share an entry. Each entry
# holds its code object, so no other code can take its id while the entry lives.
_USER, _INTERNAL, _INTERNAL_NN = 0, 1, 2
_CACHE_LIMIT = 50_000
_kinds: dict[int, tuple[CodeType, int]] = {}
_locations: dict[tuple[int, int], tuple[CodeType, SourceLocation]] = {}


def _kind(code: CodeType) -> int:
    entry = _kinds.get(id(code))
    if entry is None:
        if len(_kinds) >= _CACHE_LIMIT:
            _kinds.clear()
        filename = code.co_filename
        entry = _kinds[id(code)] = (code, _USER if not _is_internal(filename)
                                    else _INTERNAL_NN if filename.startswith(_TORCH_NN) else _INTERNAL)
    return entry[1]


def _location(code: CodeType, lineno: int) -> SourceLocation:
    entry = _locations.get((id(code), lineno))
    if entry is None:
        if len(_locations) >= _CACHE_LIMIT:
            _locations.clear()
        entry = _locations[(id(code), lineno)] = (code, SourceLocation(code.co_filename, lineno, code.co_name))
    return entry[1]


def user_stack(stop_at: FrameType | None = None) -> tuple[SourceLocation, ...]:
    """User locations from `stop_at` (the capture's entry frame, exclusive) inwards.

    When the captured program is torch's own code (exporting `nn.Linear` itself), the
    innermost torch.nn frame stands in, so every node still points at a source line.
    """
    return _walk(sys._getframe(1), stop_at)


def _walk(frame: FrameType | None, stop_at: FrameType | None, nn_fallback: bool = True) -> tuple[SourceLocation, ...]:
    """The user locations from `frame` outwards to `stop_at` (exclusive), outermost first;
    with `nn_fallback`, the innermost torch.nn frame's where there are none."""
    locations = []
    fallback = None
    kinds = _kinds
    while frame is not None and frame is not stop_at:
        code = frame.f_code
        entry = kinds.get(id(code))   # the cache read inline: this loop runs for every frame of every node
        kind = entry[1] if entry is not None else _kind(code)
        if kind == _USER:
            locations.append(_location(code, frame.f_lineno))
        elif fallback is None and kind == _INTERNAL_NN and nn_fallback:
            fallback = _location(code, frame.f_lineno)
        frame = frame.f_back
    if not locations and fallback is not None:
        return (fallback,)
    locations.reverse()
    return tuple(locations)


# Frames that can leave the stack and come back under another caller.
_RESUMABLE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR | inspect.CO_ITERABLE_COROUTINE


class UserStacks:
    """`user_stack(stop_at)` for the nodes of one capture, walking only up to the innermost
    user frame when it is the one the previous node found.

    A line of the program records several nodes (a layer's forward calls many torch functions
    from the same frame), and walking the frames outside it is most of each walk. While a
    plain function's frame runs, the frames outside it are suspended in the calls that lead
    to it, so their locations cannot change: they are remembered for that frame, and only its
    own line is read again (on the same line, the same tuple is given again: the nodes one
    torch call records share it). A generator's or coroutine's frame can be resumed from another
    caller, so it is walked in full every time."""

    def __init__(self, stop_at: FrameType | None):
        self.stop_at = stop_at
        self._frame: FrameType | None = None   # kept alive, so no other frame can take its identity
        self._outside: tuple[SourceLocation, ...] = ()
        # the last answer for that frame and its line: nodes recorded from one line share one tuple
        self._here: SourceLocation | None = None
        self._stack: tuple[SourceLocation, ...] = ()

    def __call__(self) -> tuple[SourceLocation, ...]:
        frame = sys._getframe(1)
        stop_at = self.stop_at
        kinds = _kinds
        while frame is not None and frame is not stop_at:
            code = frame.f_code
            entry = kinds.get(id(code))
            kind = entry[1] if entry is not None else _kind(code)
            if kind == _USER:
                break
            frame = frame.f_back
        else:
            return _walk(sys._getframe(1), stop_at)   # no user frame: torch.nn's stands in
        here = _location(code, frame.f_lineno)
        if frame is self._frame:
            if here is self._here:   # the same line again (one torch call records several nodes)
                return self._stack
            stack = (*self._outside, here)
        else:
            outside = _walk(frame.f_back, stop_at, nn_fallback=False)
            stack = (*outside, here)
            if code.co_flags & _RESUMABLE:
                return stack
            self._frame, self._outside = frame, outside
        self._here, self._stack = here, stack
        return stack


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
