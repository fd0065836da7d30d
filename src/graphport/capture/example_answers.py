"""draft_export's answers to data-dependent questions, taken from the example inputs.

`export` stops at a question about a value known only at run time (`if t.item() > 2`,
`nonzero(x).shape[0] % 2 == 0`) and asks for a torch._check. While draft_export captures,
the question is answered instead: the values it involves are computed by running the part
of the graph recorded so far that produces them on the real example inputs (parameters,
buffers and constants included); the answer becomes a stated fact, checked at run time by
an assertion node exactly as the torch._check the user would add, and is reported with the
line that asked and that torch._check.
"""
from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass
from typing import Any, Iterator

import sympy
import torch
import torch.fx as fx

from .. import _torch
from ..shapes.node import SymNode
from ..shapes.unbacked import as_python, readable, suggested_check
from ..source import SourceLocation, innermost_user_location


@dataclass(frozen=True)
class ExampleAnswer:
    """A data-dependent question answered from the example, and the check that makes it safe."""
    question: str            # the relation as Python (`u0 > 2`), with what each symbol is
    answer: bool
    check: str               # the torch._check(...) the program can state instead
    location: SourceLocation | None
    condition: str | None = None   # for a branch on a tensor's truth (`if s > 0:`), the user's `s > 0`


TRUTH_OF = "the truth of "   # the origin of a value standing for bool(t): TRUTH_OF + the user's expression


_ANSWERS: contextvars.ContextVar[list[ExampleAnswer] | None] = contextvars.ContextVar("graphport_answers",
                                                                                    default=None)


@contextlib.contextmanager
def answering_from_examples() -> Iterator[list[ExampleAnswer]]:
    """Within: captures answer data-dependent questions from the example inputs; the list
    collects each answer once (re-traces ask the same questions again)."""
    answers: list[ExampleAnswer] = []
    token = _ANSWERS.set(answers)
    try:
        yield answers
    finally:
        _ANSWERS.reset(token)


def active() -> bool:
    """Whether this capture answers data-dependent questions from the examples (draft_export)."""
    return _ANSWERS.get() is not None


def install(rec, env) -> None:
    """Answer from the examples in this capture, if draft_export asked for it."""
    answers = _ANSWERS.get()
    if answers is not None and env.unbacked.from_example is None:
        env.unbacked.from_example = lambda rel, location: _answer(rec, env, rel, location, answers)


def _answer(rec, env, rel: sympy.Basic, location: SourceLocation | None,
            answers: list[ExampleAnswer]) -> bool | None:
    """The answer at the example's values, stated as a checked fact and recorded; None where
    the values cannot be computed (the caller raises the data-dependent error then)."""
    values = _example_values(rec, env.unbacked.involved(rel))
    if values is None:
        return None   # a value computed where the examples cannot reach (inside a branch or loop body)
    at = sympy.sympify(rel.xreplace(values).xreplace(env.hints()))
    if at not in (sympy.true, sympy.false):
        return None
    answer = at is sympy.true
    stated = rel if answer else _negated(rel)
    location = location or innermost_user_location()
    env.assume(stated)
    if env.unbacked.asserter is not None:
        env.unbacked.asserter(SymNode(stated, env, bool))
    question = readable(rel, env.unbacked).replace(str(rel), as_python(rel), 1)
    involved = env.unbacked.involved(rel)
    origin = env.unbacked.infos[involved[0]].origin if len(involved) == 1 else ""
    condition = origin[len(TRUTH_OF):].strip("`") if origin.startswith(TRUTH_OF) else None
    found = ExampleAnswer(question, answer, suggested_check(stated, env.unbacked), location, condition)
    if found not in answers:
        answers.append(found)
    return answer


def _negated(rel: sympy.Basic) -> sympy.Basic:
    return rel.negated if isinstance(rel, sympy.core.relational.Relational) else sympy.Not(rel)


def _example_values(rec, symbols: list[sympy.Symbol]) -> dict[sympy.Symbol, sympy.Basic] | None:
    """Each symbol's value in the example run, from the nodes that compute it."""
    by_name = {n.name: n for n in rec.graph.nodes}
    env = rec.sizes.env
    targets = {}
    for sym in symbols:
        node = by_name.get(env.unbacked.infos[sym].node or "")
        if node is None:
            return None
        targets[sym] = node
    computed = _run_to(rec, list(targets.values()))
    if computed is None:
        return None
    out = {}
    for sym, node in targets.items():
        value = computed[node]
        if isinstance(value, torch.Tensor):
            value = value.item()
        out[sym] = sympy.Integer(int(value)) if isinstance(value, (bool, int)) else sympy.Float(value)
    return out


def _run_to(rec, targets: list[fx.Node]) -> dict[fx.Node, Any] | None:
    """The targets' values on the example inputs: their ancestors in the root graph, run in
    graph order on real tensors."""
    needed: set[fx.Node] = set()
    stack = list(targets)
    while stack:
        node = stack.pop()
        if node not in needed:
            needed.add(node)
            stack.extend(node.all_input_nodes)
    values: dict[fx.Node, Any] = {}
    with torch.no_grad(), _torch.outside_dispatch_modes():
        for node in rec.graph.nodes:
            if node not in needed:
                continue
            if node.op == "placeholder":
                if node not in rec.real_values:
                    return None
                values[node] = rec.real_values[node]
            elif node.op == "call_function":
                args, kwargs = fx.node.map_arg((node.args, node.kwargs), values.__getitem__)
                values[node] = node.target(*args, **kwargs)
            else:
                return None
    return values
