"""graphport's errors told in the command line's terms.

The library speaks to Python callers: its fixes name `dynamic_shapes` dicts and `Dim(...)`
objects, and an error raised outside the user's code points at whatever frame is outermost,
which on the command line is the `graphport` launcher script. Someone who typed `--dynamic`
needs the flag to pass instead, and no location at all when the only one is the launcher.
"""
from __future__ import annotations

import os
import re
import sys

from ..errors import ConstraintViolationError, GraphportError

# Library phrasings and their command-line equivalents; each pattern matches one fix text
# of graphport's (runtime input guards, shape violations, aliasing refusals).
_PHRASES = [
    (re.compile(r"export with dynamic_shapes marking dimension (\d+) of ([\w.\[\]'\"]+) as a graphport\.Dim"),
     lambda m: f"export again with --dynamic {m[2]}:{m[1]}=MIN..MAX"),
    (re.compile(r"export again with a wider Dim\('(\w+)'\)"),
     lambda m: f"export again with a wider range in the --dynamic flags naming {m[1]}"),
    (re.compile(r"export again with a wider Dim\.DYNAMIC\(min=\.\.\., max=\.\.\.\)"),
     lambda m: "export again with a wider range for that input"),
    (re.compile(r"keeping the relations declared in dynamic_shapes"),
     lambda m: "keeping the relations the --dynamic flags declare"),
    (re.compile(r"relate the dims in dynamic_shapes \(the same Dim, or a Dim expression\)"),
     lambda m: "give the dims one name in their --dynamic flags (NAME:DIM=DIMNAME:MIN..MAX)"),
    (re.compile(r"change the example inputs or the Dims so that"),
     lambda m: "change the example inputs or the --dynamic ranges so that"),
    (re.compile(r"narrow the Dims' ranges to sizes"), lambda m: "narrow the --dynamic ranges to sizes"),
    (re.compile(r"restrict the Dims or state the assumption"),
     lambda m: "narrow the --dynamic ranges or state the assumption"),
    (re.compile(r"contradicts dynamic_shapes"), lambda m: "contradicts the --dynamic flags"),
    (re.compile(r"do not fit dynamic_shapes"), lambda m: "do not fit the --dynamic flags"),
]
_SUGGESTED = re.compile(r"\nSuggested fixes:\n(?:  .*\n?)+")


def in_cli_terms(error: GraphportError, dynamic_flags: list[str] | None = None) -> str:
    """The error's message with command-line fixes. `dynamic_flags` are the --dynamic flags
    the command ran with (given or defaulted), from which corrected flags are worked out."""
    what, fix = error.what, error.fix
    location = None if _in_launcher(error.location) else error.location
    if isinstance(error, ConstraintViolationError) and dynamic_flags and "Suggested fixes:" in what:
        corrected = corrected_flags(error.msg, dynamic_flags)
        if corrected is not None:
            what = _SUGGESTED.sub("\n", what).rstrip("\n")
            fix = corrected
    for pattern, replacement in _PHRASES:
        what = pattern.sub(replacement, what)
        fix = pattern.sub(replacement, fix) if fix else fix
    return type(error)(what, fix=fix, location=location, find_location=False).msg


def _in_launcher(location) -> bool:
    """The `graphport` console script, `python -m`'s runpy, or nothing at all."""
    if location is None:
        return True
    launcher = os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else None
    return location.filename == launcher or os.path.basename(location.filename) == "runpy.py"


def corrected_flags(message: str, dynamic_flags: list[str]) -> str | None:
    """The --dynamic flags that apply the message's suggested fixes, as a fix text; None when a
    fix has no flag form (a dimension that must be a multiple of something)."""
    from ..shapes.check import refine_dynamic_shapes_from_suggested_fixes
    from ..shapes.dims import Dim
    from .targets import parse_dynamic
    spec = parse_dynamic(dynamic_flags)
    refined = refine_dynamic_shapes_from_suggested_fixes(message, spec)
    kept, static = [], []
    for arg, dims in spec.items():
        for dim in dims:
            value = (refined.get(arg) or {}).get(dim)
            if value is None or isinstance(value, int):
                static.append(f"{arg}:{dim}")
            elif isinstance(value, Dim):
                kept.append(_flag(arg, dim, value))
            else:
                return None
    parts = []
    if kept:
        parts.append("export again with " + " ".join(f"--dynamic {flag}" for flag in kept))
    if static:
        them = "them" if len(static) > 1 else "it"
        parts.append(("and " if kept else "export again ") + "without the --dynamic flag for "
                     + ", ".join(static) + f" (the program needs {them} static)")
    return " ".join(parts)


def _flag(arg: str, dim: int, value) -> str:
    name = "" if value.__name__ == f"{arg}_{dim}" else f"{value.__name__}:"
    lo = "" if value.min == 0 else str(value.min)
    hi = "" if not isinstance(value.max, int) or value.max >= sys.maxsize else str(value.max)
    return f"{arg}:{dim}={name}{lo}..{hi}"
