"""Every error a user can cause: what happened, where in their code, and how to fix it.

Each class also subclasses the builtin exception torch.export raises in the same situation
(docs/errors.md has the table), so code written against torch.export --
`except RuntimeError`, `except ValueError`, `except AssertionError` -- catches graphport's
errors unchanged. Like torch's exceptions, every error carries the full message as `.msg`.
"""
from __future__ import annotations

from .source import SourceLocation, innermost_user_location


class GraphportError(Exception):
    """Base class. Renders as: what went wrong, the user's file:line, a concrete fix.

    `what`, `fix` and `location` are the parts; `msg` (== str(error)) is the whole message,
    as torch's exceptions have it, e.g. for refine_dynamic_shapes_from_suggested_fixes(e.msg, spec).
    `torch_phrase` is what torch.export prints in the same situation (its canonical words, with
    this program's names and numbers), rendered last, so that users who search for torch's
    message and tests that match it find it in graphport's too.
    """

    def __init__(self, what: str, *, fix: str | None = None, location: SourceLocation | None = None,
                 find_location: bool = True, torch_phrase: str | None = None):
        self.what = what
        self.fix = fix
        self.torch_phrase = torch_phrase
        self.location = location if location is not None or not find_location else innermost_user_location()
        self.msg = self._render()
        super().__init__(self.msg)

    def _render(self) -> str:
        parts = [self.what]
        if self.location is not None:
            parts.append(f"  at {self.location.describe()}")
        if self.fix:
            parts.append("  fix: " + self.fix.replace("\n", "\n       "))
        if self.torch_phrase:
            parts.append(f"{TORCH_WORDS} {self.torch_phrase}")
        return "\n".join(parts)

    def add_context(self, line: str) -> None:
        """Say `line` right after the first line of what happened (where the error was met, when
        that is not where the user looks first); the lines after it, such as a list of fixes that
        refine_dynamic_shapes_from_suggested_fixes parses, stay as they are."""
        first, _, rest = self.what.partition("\n")
        self.what = "\n".join(part for part in (first, line, rest) if part)
        self.msg = self._render()
        self.args = (self.msg,)

    def __reduce__(self):   # pickles with its parts, not re-located from wherever it is unpickled
        return _rebuild, (type(self), self.what, self.fix, self.location, self.torch_phrase), self.__dict__


TORCH_WORDS = "In torch.export's words:"   # the line that starts torch's phrase in a message


def _rebuild(cls, what, fix, location, torch_phrase=None):
    err = cls.__new__(cls)
    GraphportError.__init__(err, what, fix=fix, location=location, find_location=False, torch_phrase=torch_phrase)
    return err


class UserError(GraphportError, RuntimeError):
    """The program or its inputs do something export cannot capture.

    A RuntimeError, as torch.export's user errors (torch._dynamo.exc.UserError,
    ConstraintViolationError, GuardOnDataDependentSymNode, UnsupportedOperatorException) are."""


class DataDependentError(UserError):
    """Python control flow or conversion that needs a tensor's runtime value (data-dependent)."""


class UnsupportedOperatorError(UserError):
    """An operator that cannot run on meta tensors, so its output shape is unknown."""


class OperatorError(UserError):
    """An operator rejected its arguments during capture, as it would in eager mode."""


class UnsupportedInputError(UserError, ValueError):
    """An argument of export (mod, args, an input or output, dynamic_shapes) that graphport
    cannot take: an input or output of a type it cannot flatten into tensors and constants,
    a `mod` that is not callable, `args` that is not a tuple, a malformed dynamic_shapes.

    Both a RuntimeError and a ValueError: torch.export raises ValueError for an unsupported
    input type or a non-callable `mod`, and a RuntimeError (its UserError) for the rest."""


class InvalidDimError(UnsupportedInputError, AssertionError):
    """A Dim that cannot be built (a name that is not an identifier, min > max), or a Dim given
    for an input that is not a tensor. Also an AssertionError, as torch's Dim checks are asserts."""


class InputMismatchError(UserError):
    """An exported program was called with inputs outside what it was captured for.

    Base of InputGuardError and InputStructureError; `ep.module()` raises one of those."""


class InputGuardError(InputMismatchError, AssertionError):
    """`ep.module()` refused an input's shape, dimension range, shape relation, dtype, specialized
    Python value or aliasing. An AssertionError, as torch's "Guard failed: ..." is."""


class InputStructureError(InputMismatchError, ValueError):
    """`ep.module()` was called with another input structure: missing or extra arguments or
    keys, another container, a non-tensor where a tensor was captured. A ValueError, as torch's
    "Trying to flatten user inputs with exported input tree spec" is."""


class FlatArgsError(InputStructureError, TypeError):
    """An unflattened program was called with another input structure than the export's, and
    no `FlatArgsAdapter` maps it to the exported one (or the adapter's answer does not fit).
    Also a TypeError, as torch.export's unflattened module raises there."""


class UnsupportedFeatureError(UserError):
    """A capability graphport does not have yet."""


class ConstantMutationError(UnsupportedFeatureError):
    """The program writes in place into a tensor constant: a tensor attribute that is not a
    registered buffer, or a tensor no module holds. Its update would be lost by every program
    made from the capture (lowered, saved, converted), so it is refused at export; torch.export
    refuses it when the program is lowered ("Constant ... is mutated in the forward method")."""


class ConstraintViolationError(UserError):
    """The program's shape logic contradicts the user's dynamic_shapes spec."""


class ControlFlowError(UserError):
    """A torch.cond / map / while_loop / scan whose branches or body cannot be captured as
    written: branches that disagree, a body that writes to its inputs or returns one of them.
    A RuntimeError, as torch.export's (UncapturedHigherOrderOpError, UserError) are."""


class PythonEffectError(UserError):
    """`export(..., strict=True)` found the program's Python doing something the graph cannot
    carry: a write to state that outlives the call (a global, a closure variable, a plain
    attribute, a container reachable from globals or the inputs), output or logging, I/O, a
    clock read, Python's or NumPy's random generators, an environment change. Raised before
    the effect runs. A RuntimeError, as torch.export's strict-mode refusals
    (torch._dynamo.exc.Unsupported, UserError) are. `effect` is the finding
    (graphport.PythonEffect)."""

    def __init__(self, what: str, *, effect=None, **kw):
        self.effect = effect
        super().__init__(what, **kw)


class CallSignatureError(UserError, TypeError):
    """A submodule swapped into an unflattened program does not have the calling convention
    its preserved signature froze (other arguments, or a result of another structure). Also
    a TypeError, as Python raises for a call with the wrong arguments."""


class RuntimeCheckError(GraphportError, RuntimeError):
    """`ep.module()` ran into a fact the program stated about data-dependent values
    (torch._check, torch._constrain_as_size) that these inputs break. A RuntimeError, as
    torch.export's "Runtime assertion failed for expression ..." is."""


class InternalError(GraphportError, RuntimeError):
    """graphport broke its own IR contract: a bug in graphport, not in the user's program.
    A RuntimeError but not a UserError."""

    def __init__(self, what: str, **kw):
        kw.setdefault("find_location", False)
        kw.setdefault("fix", "please report this with the program that triggered it")
        super().__init__(what, **kw)


class CommandLineError(UserError, ValueError):
    """The `graphport` command line was given something it cannot use: an entry point that
    does not import, a file that does not exist, a malformed --dynamic. A ValueError, as
    argparse's own type checks raise."""


class ArtifactError(GraphportError, RuntimeError):
    """A saved program cannot be written or read: a malformed, truncated, tampered or
    hostile archive, an unknown format version, an operator or container type this process
    has not registered, or weights that do not fit the program. A RuntimeError, as
    torch.export.load's errors on a corrupt archive (the zip reader's, SerializeError) are."""

    def __init__(self, what: str, **kw):
        kw.setdefault("find_location", False)
        super().__init__(what, **kw)


def short(value) -> str:
    """A value quoted in an error message (an archive's, mostly), cut to one line's worth."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
