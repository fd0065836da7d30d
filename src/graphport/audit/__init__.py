"""The Python audit: what the program's own Python does while capture runs it.

    frames.py    whose code is running: the user's, the standard library's, or another's
    bytecode.py  the writes and reads of a code object, with the expressions of their targets
    calls.py     calls that reach outside the graph, and container methods that write
    report.py    one finding (PythonEffect): kind, what, where, fix
    watch.py     the hooks that watch the program and classify what it does

Capture runs the program as ordinary Python (non-strict tracing); strictness is this audit.
`export(strict=True)` refuses the effects it finds; the default warns and reports them on
the program (`ep.python_effects`).
"""
from .report import BAKED, PythonEffect, PythonEffectWarning
from .watch import PythonAudit

__all__ = ["BAKED", "PythonAudit", "PythonEffect", "PythonEffectWarning"]
