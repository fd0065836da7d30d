"""Broadcasting sizes without asking a question: the broadcast shape exists where every
dimension's sizes are one expression or the constant 1, and then it holds at every size.

Used by capture's closed forms for symbolic sizes and by the load check's rules for static
ones (serde/meta_rules.py); it imports neither sympy nor capture, so a static program's
load stays clear of both.
"""
from __future__ import annotations

from typing import Any

import torch


def broadcast_shapes(shapes: list[tuple]) -> tuple | None:
    """The broadcast shape where every dimension's sizes are one expression or the constant 1."""
    rank = max(len(s) for s in shapes)
    out = []
    for d in range(-rank, 0):
        size: Any = 1
        for s in shapes:
            if -d > len(s):
                continue
            here = s[d]
            if is_one(here) or same_size(here, size):
                continue
            if not is_one(size):
                return None
            size = here
        out.append(size)
    return tuple(out)


def is_one(size) -> bool:
    return type(size) is int and size == 1


def same_size(a, b) -> bool:
    """The same size at every point of the ranges: equal expressions (no question asked)."""
    if isinstance(a, torch.SymInt) and isinstance(b, torch.SymInt):
        return a.node.expr == b.node.expr
    return type(a) is int and type(b) is int and a == b


def same_sizes(a, b) -> bool:
    return len(a) == len(b) and all(map(same_size, a, b))
