"""`draft_export`: export that works around the problems it can, and says what it did.

Where `export` stops at a dynamic_shapes spec the program contradicts (a dim it
specializes, narrows, or relates to another), `draft_export` applies the error's suggested
fix to the spec, exports again, and records the problem with its file:line and the fix, so
the user can paste the final spec into `export`. Where `export` stops at a question about a
data-dependent value (`if t.item() > 2`, a branch on a tensor's value), the question is
answered from the example inputs and the answer is checked at run time by an assertion in
the graph (capture/example_answers.py): the program is valid for every input, and refuses
those that would take another path. Each answer is reported with its line and the
torch._check that states it. What `export(strict=True)` refuses in the program's Python (a
write to state that outlives the call, printing, a clock read: graphport.audit) is reported
as an issue with its line and fix, and the program is exported as the default export would.
Problems it cannot work around soundly end it with their error, as `export` would, carrying
the issues found so far on the error (`err.report`). A round that would run a program with
Python effects again to refine the spec ends it the same way: graphport never repeats the
program's effects.
"""
from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from .audit import PythonEffect, PythonEffectWarning
from .capture.example_answers import ExampleAnswer, answering_from_examples
from .errors import ConstraintViolationError
from .export import export
from .program import ExportedProgram
from .shapes.check import refine_dynamic_shapes_from_suggested_fixes
from .source import SourceLocation

_MAX_ROUNDS = 8   # each round fixes at least one dim; a spec has few


@dataclass
class DraftIssue:
    """One problem worked around: what the program required, where, and the fix applied."""
    kind: str                         # "guard added": the spec was narrowed or related to fit it;
                                      # "data-dependent": answered from the example, checked at run time;
                                      # "python effect": what strict export refuses (graphport.audit)
    what: str
    location: SourceLocation | None
    fix: str

    def __str__(self) -> str:
        where = f"\n    at {self.location.describe()}" if self.location is not None else ""
        label = "fix applied" if self.kind == "guard added" else "fix"
        return f"[{self.kind}] {self.what}{where}\n    {label}: {self.fix}"


@dataclass
class DraftExportReport:
    """The issues draft_export worked around, and the spec that export accepts as is."""
    failures: list[DraftIssue] = field(default_factory=list)
    dynamic_shapes: Any = None

    def successful(self) -> bool:
        return not self.failures

    def __str__(self) -> str:
        if not self.failures:
            return "draft_export: no issues found; export gives the same program"
        lines = [f"draft_export: {len(self.failures)} issue(s) worked around; export accepts the program with",
                 f"    dynamic_shapes={self.dynamic_shapes!r}", ""]
        lines += [f"{i}. {issue}" for i, issue in enumerate(self.failures, 1)]
        return "\n".join(lines)


_VIOLATION = re.compile(r"^- (.*?)(?: \(at (.+):(\d+) in (\S+)\))?$")
_FIX = re.compile(r"^\s+(\w+) = (.+)$")


def _issues(err: ConstraintViolationError) -> list[DraftIssue]:
    """One issue per violation the error lists, each with the suggested fixes naming its dims."""
    head, _, fixes_text = err.what.partition("Suggested fixes:")
    fixes = [m.groups() for m in map(_FIX.match, fixes_text.splitlines()) if m]
    issues = []
    for line in head.splitlines():
        match = _VIOLATION.match(line)
        if match is None:
            continue
        what, filename, lineno, function = match.groups()
        location = SourceLocation(filename, int(lineno), function) if filename else err.location
        named = [f"{name} = {value}" for name, value in fixes if re.search(rf"\b{re.escape(name)}\b", what)]
        issues.append(DraftIssue("guard added", what, location, "; ".join(named) or str(err.fix)))
    return issues or [DraftIssue("guard added", head.strip(), err.location, str(err.fix))]


def _answered(answer: ExampleAnswer) -> DraftIssue:
    if answer.condition is not None:   # `if s > 0:`: no torch._check settles a later bool(tensor)
        cond = answer.condition
        return DraftIssue("data-dependent", f"the program branches on `{cond}`, a tensor's value (data-dependent); "
                                            f"answered {answer.answer} from the example inputs, checked at run "
                                            f"time: inputs for which it is {not answer.answer} are refused",
                          answer.location,
                          f"to keep both paths, branch with torch.cond({cond}, true_fn, false_fn, operands), "
                          f"or compute both and choose with torch.where({cond}, a, b)")
    return DraftIssue("data-dependent", f"the program asks whether {answer.question}, which depends on tensor "
                                        f"values (data-dependent); answered {answer.answer} from the example "
                                        "inputs, checked at run time", answer.location,
                      f"state the answer before this line, with {answer.check}")


def _effect(effect: PythonEffect) -> DraftIssue:
    return DraftIssue("python effect", f"the program's Python {effect.what} ({effect.kind}; strict export refuses "
                                       "it)", effect.location, effect.fix)


def draft_export(mod: torch.nn.Module | Callable, args: tuple, kwargs: dict | None = None, *,
                 dynamic_shapes: Any = None, **options: Any) -> ExportedProgram:
    """Export `mod`, refining `dynamic_shapes` wherever the program contradicts it. The
    returned program has the report as `ep._report` (as torch's draft_export does)."""
    report = DraftExportReport(dynamic_shapes=dynamic_shapes)
    options = {**options, "strict": False, "audit_python": True}   # effects become issues, not errors
    for _ in range(_MAX_ROUNDS):
        try:
            with answering_from_examples() as answers, warnings.catch_warnings():
                warnings.simplefilter("ignore", PythonEffectWarning)
                ep = export(mod, args, kwargs, dynamic_shapes=report.dynamic_shapes, **options)
        except ConstraintViolationError as err:
            refined = refine_dynamic_shapes_from_suggested_fixes(err.msg, report.dynamic_shapes)
            effects = [e for e in getattr(err, "python_effects", []) if e.refused_by_strict]
            if effects and repr(refined) != repr(report.dynamic_shapes):
                report.failures += [_effect(e) for e in effects]
                stop = ConstraintViolationError(
                    f"draft_export stops: refining dynamic_shapes means exporting again, which would run the "
                    f"program's Python effects a second time.\n{err.what}\n{report}",
                    fix=f"remove or guard the effects listed, then run draft_export again; or export with "
                        f"dynamic_shapes={refined!r}", location=err.location)
                stop.report = report
                raise stop from err
            if refined is report.dynamic_shapes or repr(refined) == repr(report.dynamic_shapes):
                err.report = report
                raise
            report.failures += _issues(err)
            report.dynamic_shapes = refined
            continue
        except Exception as err:
            err.report = report
            raise
        report.failures += [_answered(a) for a in answers]
        report.failures += [_effect(e) for e in ep.python_effects if e.refused_by_strict]
        return ep.replace(draft_report=report)
    raise ConstraintViolationError(
        f"draft_export could not settle dynamic_shapes after {_MAX_ROUNDS} rounds of fixes:\n{report}",
        fix="start from the spec in the report and export again")
