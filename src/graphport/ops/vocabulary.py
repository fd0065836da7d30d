"""The IR's vocabulary of Python-level call targets, in one table.

A program's `call_function` nodes call ATen or custom operator overloads, torch's
higher-order operators, and the Python functions below: `operator.getitem` to take one
result of a multi-output node, and the symbolic-size operators that compute sizes from
sizes (`x.size(0) // 2`) as torch.export writes them. The verifier admits exactly these,
replay re-runs them on SymInts, and the artifact names them by the keys here, so adding
one is one line in this table and nothing else.
"""
from __future__ import annotations

import operator
from typing import Any, Callable

import torch

# name in the artifact -> function; the operations of size arithmetic and relations
SYMBOLIC_SIZE_OPERATORS: dict[str, Callable[..., Any]] = {
    **{f"operator.{name}": getattr(operator, name) for name in (
        "add", "sub", "mul", "floordiv", "truediv", "mod", "pow", "neg",
        "eq", "ne", "lt", "le", "gt", "ge", "and_", "or_")},
    **{f"torch.{name}": getattr(torch, name) for name in (
        "sym_max", "sym_min", "sym_not", "sym_float", "sym_int", "sym_sqrt", "sym_ite")},
}
SYMBOLIC_SIZE_OPS = frozenset(SYMBOLIC_SIZE_OPERATORS.values())

# every Python function a node may call, by its name in the artifact
PYTHON_TARGETS: dict[str, Callable[..., Any]] = {"operator.getitem": operator.getitem, **SYMBOLIC_SIZE_OPERATORS}


def is_symbolic_size_op(target: Any) -> bool:
    return target in SYMBOLIC_SIZE_OPS
