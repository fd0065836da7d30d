"""Export again with the branches on undecided size predicates captured as conds.

Called when the plain capture's guards contradict the spec: the capture is made again
with the program run as a tree of its undecided branch questions (capture/branch_split.py),
growing the tree by one question per capture until a capture asks none it may split.
None when that does not give a program (no branch question was undecided, a side fails,
the sides disagree, more questions than the bound, or the result still violates the spec):
the plain capture's error then stands.
"""
from __future__ import annotations

import logging
from typing import Callable

from .capture import Captured
from .capture.branch_split import QuestionTree, Splitting, split_program
from .program import ExportedProgram
from .shapes.spec import InputShapes

log = logging.getLogger("graphport.shapes")


def export_with_split_branches(fn: Callable, make_shapes: Callable[[], InputShapes],
                               trace: Callable[[Callable, InputShapes], Captured],
                               finish: Callable[[Callable, Captured, InputShapes], ExportedProgram]
                               ) -> ExportedProgram | None:
    tree = QuestionTree()
    while True:
        shapes = make_shapes()
        splitting = Splitting(tree)
        program = split_program(fn, tree, dict(shapes.env.symbols), splitting)
        shapes.env.splitting = splitting
        try:
            captured = trace(program, shapes)
        except Exception as err:   # noqa: BLE001 (a side that fails, as eager would there, or disagrees)
            captured = None
            log.info("capture with %d branch question(s) split stopped: %s", tree.questions(), err)
        finally:
            shapes.env.splitting = None
        if splitting.request is not None:
            path, question, location = splitting.request
            log.info("splitting on the undecided branch question %s at %s", question, location)
            tree.split(path, question, location)
            continue
        if captured is None or tree.questions() == 0:
            return None
        try:
            return finish(program, captured, shapes)
        except Exception as err:   # noqa: BLE001 (the plain capture's error is the one to report)
            log.info("the capture with its branch questions split is refused too: %s", err)
            return None
