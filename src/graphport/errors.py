"""Every error a user can cause: what happened, where in their code, and how to fix it."""
from __future__ import annotations

from .source import SourceLocation, innermost_user_location


class GraphportError(Exception):
    """Base class. Renders as: what went wrong, the user's file:line, a concrete fix."""

    def __init__(self, what: str, *, fix: str | None = None, location: SourceLocation | None = None,
                 find_location: bool = True):
        self.what = what
        self.fix = fix
        self.location = location if location is not None or not find_location else innermost_user_location()
        super().__init__(self._render())

    def _render(self) -> str:
        parts = [self.what]
        if self.location is not None:
            parts.append(f"  at {self.location.describe()}")
        if self.fix:
            parts.append("  fix: " + self.fix.replace("\n", "\n       "))
        return "\n".join(parts)


class UserError(GraphportError):
    """The program or its inputs do something export cannot capture."""


class DataDependentError(UserError):
    """Python control flow or conversion that needs a tensor's runtime value."""


class UnsupportedOperatorError(UserError):
    """An operator that cannot run on meta tensors, so its output shape is unknown."""


class OperatorError(UserError):
    """An operator rejected its arguments during capture, as it would in eager mode."""


class UnsupportedInputError(UserError):
    """An input (or output) of a type graphport cannot flatten into tensors and constants."""


class InputMismatchError(UserError):
    """An exported program was called with inputs outside what it was captured for."""


class UnsupportedFeatureError(UserError):
    """A capability graphport does not have yet."""


class ConstraintViolationError(UserError):
    """The program's shape logic contradicts the user's dynamic_shapes spec."""


class InternalError(GraphportError):
    """graphport broke its own IR contract: a bug in graphport, not in the user's program."""

    def __init__(self, what: str, **kw):
        kw.setdefault("find_location", False)
        kw.setdefault("fix", "please report this with the program that triggered it")
        super().__init__(what, **kw)
