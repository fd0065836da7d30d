"""Python branches on size predicates the spec cannot decide, captured as a cond.

`if num_patches == num_positions and height == width: return self.position_embeddings`
asks a question about input sizes that the declared ranges do not settle: a guard on it
would narrow the spec (torch.export records it and refuses most image sizes at call time).
Python gives no way to trace the other side of one `if` alone, so the program is run
once per side, from the start: the capture becomes `cond(P, program given P, program
given not P)`, each side traced with its fact in the shape environment (shapes/
branch_facts.py), so that questions following from P are answered, not guarded. A side
that meets another undecided question splits again, so the sides form a tree of
questions. The cond's predicate is computed from the input sizes in the graph, so the
artifact picks the side at run time wherever it runs.

Why this is sound: each side is a capture of the whole program that is valid exactly
where its facts hold (its own guards still have to pass the spec check), and the cond
runs it only there. What the sides return must agree: the same output structure and
Python values, and tensors of the same dtype, rank and sizes wherever the predicate lets
them run (torch.cond's own checks in capture/control_flow.py); writes to buffers or inputs
inside a side are refused there (a cond's branches are functional).

What it costs: every question split adds one side to trace, and the capture is made
again from the start for each new question, so the number of questions split per export
is bounded (MAX_QUESTIONS); past it, the question is a guard as before and export refuses
it with its usual error. A question whose sides were shown to compute the same values
(split_export.py) is answered from the example instead, unguarded (`Splitting.either_side`),
and counts toward the same bound.
"""
from __future__ import annotations

import functools
import operator
from dataclasses import dataclass
from typing import Any, Callable

import sympy
import torch

from .. import _torch
from ..shapes.env import BranchUndecided, ShapeEnv
from ..shapes.expr import FloorDiv, Mod
from ..source import SourceLocation
from .environment import ModuleSnapshot

pytree = _torch.pytree

# questions split per export at most (each adds a side to trace and a capture from the start)
MAX_QUESTIONS = 4


@dataclass
class QuestionTree:
    """The undecided questions found so far: a leaf (`question` None) runs the program; a
    node asks `question` (a relation over the input size symbols) and goes to one side."""
    question: sympy.Basic | None = None
    location: SourceLocation | None = None
    true: "QuestionTree | None" = None
    false: "QuestionTree | None" = None

    def questions(self) -> int:
        if self.question is None:
            return 0
        return 1 + self.true.questions() + self.false.questions()

    def split(self, path: tuple[bool, ...], question: sympy.Basic, location: SourceLocation | None) -> None:
        """Make the leaf at `path` ask `question`."""
        node = self
        for side in path:
            node = node.true if side else node.false
        node.question, node.location = question, location
        node.true, node.false = QuestionTree(), QuestionTree()


class Splitting:
    """The shape environment's `splitting` while a split capture runs: the first undecided
    branch question, while fewer than MAX_QUESTIONS have been split, is remembered with the
    side it was asked on and stops the capture (a question the program catches is still
    remembered, so the capture is made again either way)."""

    def __init__(self, tree: QuestionTree, either_side: frozenset = frozenset()):
        self.tree = tree
        self.either_side = either_side   # questions whose two sides compute the same values
        self.path: tuple[bool, ...] = ()
        self.request: tuple | None = None

    def undecided(self, rel: sympy.Basic, location: SourceLocation | None) -> bool:
        """True when `rel` is one of `either_side` (the caller answers it from the example,
        without a guard); False when the split budget is spent (the caller guards it);
        otherwise the question is remembered and BranchUndecided raised."""
        if rel in self.either_side:
            return True
        if self.tree.questions() + len(self.either_side) >= MAX_QUESTIONS:
            return False
        if self.request is None:
            self.request = (self.path, rel, location)
        raise BranchUndecided(rel, location)


class SidesDisagree(Exception):
    """The sides return different structures or Python values: no cond can join them."""


def split_program(fn: Callable, tree: QuestionTree, env_symbols: dict, splitting: Splitting | None) -> Callable:
    """`fn` run as the tree of its undecided questions: each question a torch.cond on the
    input sizes, each leaf `fn` itself, traced given the facts on its way."""
    layouts: list[tuple[Any, list]] = []
    root = fn if isinstance(fn, torch.nn.Module) else getattr(fn, "__self__", None)
    root = root if isinstance(root, torch.nn.Module) else None

    @functools.wraps(fn)
    def program(*args, **kwargs):
        flat = pytree.tree_flatten((args, kwargs))[0]
        layouts.clear()
        outs = _run(tree, (), (), flat, args, kwargs)
        spec, constants = layouts[0]
        for other_spec, other_constants in layouts[1:]:
            if other_spec != spec or not _same_values(constants, other_constants):
                raise SidesDisagree(f"the sides return {spec} and {other_spec}")
        tensors = iter(outs)
        leaves = [next(tensors) if c is _TENSOR else c for c in constants]
        return pytree.tree_unflatten(leaves, spec)

    def _run(node: QuestionTree, path: tuple, facts: tuple, flat: list, args, kwargs) -> tuple:
        if node.question is None:
            return _leaf(path, facts, flat, args, kwargs)
        pred = _evaluate(node.question, _symbol_values(env_symbols, flat))
        if isinstance(pred, bool):   # the sizes of this trace settle it (a retrace at pinned sizes)
            side = node.true if pred else node.false
            return _run(side, path + (pred,), facts, flat, args, kwargs)
        rel = pred.node.expr
        outs = torch.cond(pred, lambda: _run(node.true, path + (True,), facts + (rel,), flat, args, kwargs),
                          lambda: _run(node.false, path + (False,), facts + (sympy.Not(rel),), flat, args, kwargs),
                          ())
        return tuple(outs)

    def _leaf(path: tuple, facts: tuple, flat: list, args, kwargs) -> tuple:
        env = _env_of(flat)
        saved = env.branch_facts if env is not None else ()
        if splitting is not None:
            splitting.path = path
        if env is not None:
            env.branch_facts = facts
        # each leaf is one call of the program from the module's state at the call: a side that
        # rewrites the module's attributes (Swin's `self.shift_size = 0` where its last stage is
        # one window) must not leave them rewritten for the next side's trace
        snapshot = ModuleSnapshot(root) if root is not None else None
        try:
            out = fn(*args, **kwargs)
        finally:
            if snapshot is not None:
                snapshot.restore()
            if env is not None:
                env.branch_facts = saved
        leaves, spec = pytree.tree_flatten(out)
        leaves = _distinct(leaves)
        constants = []
        for leaf in leaves:
            if isinstance(leaf, (torch.SymInt, torch.SymFloat, torch.SymBool)):
                raise SidesDisagree(f"the program returns a size ({leaf}) that a side decides")
            constants.append(_TENSOR if isinstance(leaf, torch.Tensor) else leaf)
        layouts.append((spec, constants))
        return tuple(leaf for leaf in leaves if isinstance(leaf, torch.Tensor))

    return program


_TENSOR = object()


def _distinct(leaves: list) -> list:
    """The outputs with each one that shares memory with an earlier one (a pooled output that
    is a view of the hidden states) copied: a cond's outputs are distinct tensors. The values
    are the same; only a write through one output would tell, and a graph output is a fresh
    tensor of the caller's."""
    roots: set[int] = set()
    distinct = []
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            base = getattr(leaf, "gp_base", None)
            root = id(base if base is not None else leaf)
            if root in roots:
                leaf = leaf.clone()
            roots.add(root)
        distinct.append(leaf)
    return distinct


def _same_values(a: list, b: list) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x is _TENSOR or y is _TENSOR:
            if x is not y:
                return False
            continue
        try:
            if type(x) is not type(y) or not bool(x == y):
                return False
        except Exception:   # values without a plain equality: not provably the same
            return False
    return True


def _env_of(flat: list) -> ShapeEnv | None:
    for leaf in flat:
        if isinstance(leaf, torch.Tensor):
            for size in leaf.shape:
                if isinstance(size, torch.SymInt):
                    return size.node.env
    return None


def _symbol_values(symbols: dict, flat: list) -> dict:
    """Each size symbol of the split capture as this trace's value of it: read from the input
    dimension it was first read from (`size = coeff * symbol + offset`)."""
    values = {}
    for sym, info in symbols.items():
        index, dim = info.source
        coeff, offset = info.source_affine
        size = flat[index].shape[dim]
        values[sym] = (size - offset) // coeff if (coeff, offset) != (1, 0) else size
    return values


_RELATIONS = {sympy.Eq: operator.eq, sympy.Ne: operator.ne, sympy.Lt: operator.lt, sympy.Le: operator.le,
              sympy.Gt: operator.gt, sympy.Ge: operator.ge}


def _evaluate(expr: sympy.Basic, values: dict) -> Any:
    """`expr` computed with Python operators on this trace's sizes (SymInts or ints), so that
    its value is recorded in the graph with the operations that make it."""
    if expr.is_Symbol:
        return values[expr]
    if expr.is_Integer:
        return int(expr)
    if expr is sympy.true or expr is sympy.false:
        return bool(expr)
    args = [_evaluate(a, values) for a in expr.args]
    if expr.is_Add:
        return functools.reduce(operator.add, args)
    if expr.is_Mul:
        return functools.reduce(operator.mul, args)
    if expr.is_Pow and expr.exp.is_Integer and int(expr.exp) >= 0:
        return args[0] ** int(expr.exp)
    if isinstance(expr, FloorDiv):
        return args[0] // args[1]
    if isinstance(expr, Mod):
        return args[0] % args[1]
    if isinstance(expr, sympy.Max):
        return functools.reduce(torch.sym_max, args)
    if isinstance(expr, sympy.Min):
        return functools.reduce(torch.sym_min, args)
    for kind, op in _RELATIONS.items():
        if isinstance(expr, kind):
            return op(*args)
    if isinstance(expr, sympy.And):
        return functools.reduce(operator.and_, args)
    if isinstance(expr, sympy.Or):
        return functools.reduce(operator.or_, args)
    if isinstance(expr, sympy.Not):
        return torch.sym_not(args[0])
    raise SidesDisagree(f"the question {expr} cannot be computed from the input sizes")
