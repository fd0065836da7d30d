"""Export again with the branches on undecided size predicates captured as conds.

Called when the plain capture's guards contradict the spec: the capture is made again
with the program run as a tree of its undecided branch questions (capture/branch_split.py),
growing the tree by one question per capture until a capture asks none it may split.
None when that does not give a program (no branch question was undecided, a side fails,
the sides disagree, more questions than the bound, or the result still violates the spec):
the plain capture's error then stands.

A question whose two sides compute the same values (`if x.shape[0] >= 64: x = x.contiguous()`)
needs no cond: once both sides are captured and their graphs are the same computation
(`same_computation`), the capture is made once more with the question answered the way the
example goes and no guard, and that program, one graph, serves every size. If that capture
is refused, the program with the cond stands.

When no program comes of it, a split capture's refusal (in a side's trace or in export's
checks) is the one raised where it names no split branch's line: it names the line inside a
side that stands in the way, where the plain capture's names the branch that the split
already handled.
"""
from __future__ import annotations

import logging
from typing import Callable

import torch
import torch.fx

from .capture import Captured
from .capture.branch_split import QuestionTree, Splitting, split_program
from .errors import ControlFlowError, GraphportError
from .program import ExportedProgram
from .shapes.expr import same_value
from .shapes.node import size_expr
from .shapes.spec import InputShapes

log = logging.getLogger("graphport.shapes")


def export_with_split_branches(fn: Callable, make_shapes: Callable[[], InputShapes],
                               trace: Callable[[Callable, InputShapes], Captured],
                               finish: Callable[[Callable, Captured, InputShapes], ExportedProgram]
                               ) -> ExportedProgram | None:
    either_side: frozenset = frozenset()
    with_cond = None
    refusals: list[GraphportError] = []
    while True:
        found = _export_split(fn, make_shapes, trace, finish, either_side, refusals)
        if found is None:
            if with_cond is None and refusals:
                raise refusals[-1]   # the split capture's own refusal: the line inside a side
            return with_cond   # the program with the cond, when the one without it is refused
        program, tree = found
        if tree.questions() == 0:
            return program
        with_cond = program
        sides = _root_sides(program.graph_module)
        if sides is None or not same_computation(*sides):
            return program
        log.info("both sides of %s compute the same values: captured again with no cond", tree.question)
        either_side = either_side | {tree.question}


def _export_split(fn, make_shapes, trace, finish, either_side: frozenset, refusals: list):
    """(program, its question tree) with the undecided branch questions split into conds, those
    in `either_side` answered from the example; None when that gives no program. A capture with
    questions split that is refused by export's checks appends its error to `refusals`."""
    tree = QuestionTree()
    while True:
        shapes = make_shapes()
        splitting = Splitting(tree, either_side)
        program = split_program(fn, tree, dict(shapes.env.symbols), splitting)
        shapes.env.splitting = splitting
        try:
            captured = trace(program, shapes)
        except Exception as err:   # noqa: BLE001 (a side that fails, as eager would there, or disagrees)
            captured = None
            log.info("capture with %d branch question(s) split stopped: %s", tree.questions(), err)
            _keep_refusal(err, tree, refusals)
        finally:
            shapes.env.splitting = None
        if splitting.request is not None:
            path, question, location = splitting.request
            log.info("splitting on the undecided branch question %s at %s", question, location)
            tree.split(path, question, location)
            continue
        if captured is None or (tree.questions() == 0 and not either_side):
            return None
        try:
            return finish(program, captured, shapes), tree
        except Exception as err:   # noqa: BLE001 (reported by the caller, or the plain capture's error is)
            log.info("the capture with its branch questions split is refused too: %s", err)
            _keep_refusal(err, tree, refusals)
            return None


def _keep_refusal(err: Exception, tree: QuestionTree, refusals: list) -> None:
    """Remember a refusal met inside a side (a question split, the program's own line named).
    Not one about joining the sides into the cond (a ControlFlowError speaks of torch.cond,
    which the user did not write), nor one that still names a split branch's line (the split
    did not get past it, and the plain capture's error, which lists everything the plain
    capture found, is the complete one)."""
    if not isinstance(err, GraphportError) or isinstance(err, ControlFlowError) or not tree.questions():
        return
    if any(str(location) in err.msg for location in _locations(tree)):
        return
    if tree.location is not None:
        err.add_context(f"  (the branch at {tree.location} was captured with both of its sides, as a cond: "
                        "this is refused on one of them)")
    refusals.append(err)


def _locations(tree: QuestionTree) -> list:
    if tree.question is None:
        return []
    own = [tree.location] if tree.location is not None else []
    return own + _locations(tree.true) + _locations(tree.false)


# -- sides that compute the same values --------------------------------------------------------

_aten = torch.ops.aten
# ops whose result holds its operand's values (a copy): dropped before two sides are compared
_SAME_VALUES = frozenset({_aten.clone.default, _aten.alias.default})
# what reads a tensor's layout rather than its values: a copy changes the answer, so sides
# using any of these are never taken for the same computation
_READS_LAYOUT = ("stride", "storage_offset", "as_strided", "_reshape_alias", "is_contiguous", "is_non_overlapping",
                 "view.dtype", "data_ptr", "set_")


def _root_sides(gm: torch.fx.GraphModule) -> tuple | None:
    """The true and false graphs of the one cond the split put around the whole program."""
    conds = [n for n in gm.graph.nodes if n.op == "call_function" and n.target is torch.ops.higher_order.cond]
    if len(conds) != 1:
        return None
    true_graph, false_graph = (getattr(gm, a.target) for a in conds[0].args[1:3])
    return true_graph, false_graph


def same_computation(a: torch.fx.GraphModule, b: torch.fx.GraphModule) -> bool:
    """Whether two branch graphs compute the same values from the same operands at every size:
    the same operators on the same arguments once copies (`clone`, which a `contiguous()`
    records) are read as their operand, nothing reading a layout, and outputs of the same
    sizes and strides (strides are observable in the outputs). Floating-point results of
    operators whose summation order follows the layout may differ in rounding only."""
    keys_a, keys_b = _computation(a), _computation(b)
    if keys_a is None or keys_b is None or keys_a != keys_b:
        return False
    return _same_output_layouts(_outputs(a), _outputs(b))


def _computation(gm: torch.fx.GraphModule) -> tuple | None:
    """The graph as a tuple of (operator, arguments) with nodes numbered in order, copies read
    as their operand and subgraphs by their own computation; None if something reads a layout."""
    number: dict = {}
    steps = []

    def arg(value):
        if isinstance(value, torch.fx.Node):
            return ("node", number[value])
        if isinstance(value, (list, tuple)):
            return tuple(arg(v) for v in value)
        if isinstance(value, dict):
            return tuple(sorted((k, arg(v)) for k, v in value.items()))
        if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool, torch.Tensor)):
            raise _Unreadable
        return (type(value).__name__, repr(value))

    try:
        for node in gm.graph.nodes:
            if node.op == "call_function" and node.target in _SAME_VALUES:
                number[node] = number[node.args[0]]
                continue
            name = getattr(node.target, "__name__", None) or str(node.target)
            if node.op == "call_function" and any(part in str(node.target) for part in _READS_LAYOUT):
                return None
            if node.op == "get_attr":
                sub = getattr(gm, node.target)
                if not isinstance(sub, torch.fx.GraphModule):
                    return None
                inner = _computation(sub)
                if inner is None:
                    return None
                key = ("subgraph", inner)
            elif node.op == "placeholder":
                key = ("placeholder",)
            elif node.op in ("call_function", "output"):
                key = (node.op, name, str(node.target), arg(node.args), arg(node.kwargs))
            else:
                return None
            number[node] = len(steps)
            steps.append(key)
    except _Unreadable:
        return None
    return tuple(steps)


class _Unreadable(Exception):
    pass


def _outputs(gm: torch.fx.GraphModule) -> list:
    output = next(n for n in gm.graph.nodes if n.op == "output")
    return [a.meta.get("val") if isinstance(a, torch.fx.Node) else a for a in output.args[0]]


def _same_output_layouts(a: list, b: list) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor) != isinstance(y, torch.Tensor):
            return False
        if not isinstance(x, torch.Tensor):
            continue
        if x.dim() != y.dim() or not _same_sizes(x.shape, y.shape) or not _same_sizes(x.stride(), y.stride()) \
                or not _same_sizes([x.storage_offset()], [y.storage_offset()]):
            return False
    return True


def _same_sizes(a, b) -> bool:
    return all(same_value(size_expr(x), size_expr(y)) for x, y in zip(a, b))


