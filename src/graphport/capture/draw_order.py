"""The order in which an in-place random op draws its numbers, for its functional stand-in.

Eager's CPU `bernoulli_(p)` with a scalar p fills the tensor it writes in memory order,
while its functional form `bernoulli.p` returns a fresh contiguous tensor filled in
logical (row-major) order: on a transposed or column-major tensor (a clone of `x.t()`,
`torch.nonzero`'s result) the two put the same numbers at different elements. The capture
records the functional form on the written tensor permuted so that its logical order is
its memory order, and permutes the draw back: the numbers land where eager puts them.

The memory order is read from the layout's stride expressions, not from their values, so
it holds at every size the program may be called with: a dense layout's innermost
dimension has stride 1 and each next one has the stride of the previous times its size.
"""
from __future__ import annotations

import sympy
import torch

from ..errors import UnsupportedFeatureError
from . import memory_overlap

# In-place random ops whose CPU kernel draws in memory order while their functional form
# draws in logical order (the other in-place draws lay their functional result out like
# the written tensor, so both orders agree already).
DRAWS_IN_MEMORY_ORDER = frozenset({torch.ops.aten.bernoulli_.float})


def _expr(value) -> sympy.Expr:
    return sympy.Integer(value) if isinstance(value, int) else value.node.expr


def _same(a: sympy.Expr, b: sympy.Expr) -> bool:
    """Equal as expressions. Contiguous strides spell a size s as Max(1, s): equal to s
    wherever the tensor has elements to draw."""
    drop_floor = {m: m.args[1] for m in (a - b).atoms(sympy.Max) if len(m.args) == 2 and m.args[0] == 1}
    return sympy.expand((a - b).xreplace(drop_floor)) == 0


def memory_order(shape, strides) -> list[int] | None:
    """The dimensions from outermost to innermost in memory, when the layout is dense (no
    gaps, no overlap) by its stride expressions; None when it is not. Walking from the
    innermost, ties go to the later dimension and a dimension of size 1 whose stride fits
    nowhere goes where it is reached (where it goes does not move any element): so a
    layout pinned at sizes 0 or 1 orders as the general layout it instantiates."""
    sizes, steps = [_expr(s) for s in shape], [_expr(s) for s in strides]
    left, inner_first, expected = list(range(len(sizes))), [], sympy.Integer(1)
    while left:
        found = next((d for d in reversed(left) if _same(steps[d], expected)), None)
        if found is None:
            found = next((d for d in reversed(left) if sizes[d] == 1), None)
        if found is None:
            return None
        left.remove(found)
        inner_first.append(found)
        expected = expected * sizes[found]
    return inner_first[::-1]


def concrete_memory_order(shape, strides) -> list[int] | None:
    """The order TensorIterator walks a layout with concrete strides (outermost first)."""
    if not all(isinstance(v, int) for v in (*shape, *strides)):
        return None
    return sorted(range(len(shape)), key=lambda d: (shape[d] != 1, strides[d]), reverse=True)


def proven_memory_order(meta: torch.Tensor) -> list[int] | None:
    """The order TensorIterator walks a layout with symbolic strides (a window with gaps,
    `x.t()[:, ::2]`): the example's order, where the declared ranges prove that every
    dimension holding more than one element has a larger stride than the next one inward, at
    every size (capture/memory_overlap.py's proofs); None where they do not, or where a size
    depends on tensor values (no example to order by)."""
    try:
        shape, strides, _ = memory_overlap.example_layout(meta)
    except memory_overlap.NoExampleLayout:
        return None
    order = concrete_memory_order(tuple(shape), tuple(strides))

    def ordered(layouts, proves) -> bool:
        sizes, steps, _ = layouts[0]
        walked = [d for d in order if not proves(sympy.Le(sizes[d], 1))]
        return all(proves(sympy.Gt(steps[outer], steps[inner])) for outer, inner in zip(walked, walked[1:]))

    proofs = memory_overlap.Sizes([meta])
    return order if proofs.proven(ordered, [memory_overlap.symbolic_layout(meta)]) else None


def draw_permutation(meta: torch.Tensor) -> list[int] | None:
    """The permutation that makes `meta`'s logical order its memory order; None when the
    two agree already (a contiguous tensor). Read from the layout alone, not from which
    sizes are 0 or 1, so that traces pinned at such sizes record what the general trace
    records wherever the layout is the same."""
    order = memory_order(meta.shape, meta.stride())
    if order is None:
        order = concrete_memory_order(tuple(meta.shape), tuple(meta.stride()))
    if order is None:
        order = proven_memory_order(meta)
    if order is None:
        raise UnsupportedFeatureError(
            f"the program draws random numbers in place into a tensor of shape {list(meta.shape)} whose layout "
            f"(strides {list(meta.stride())}) graphport cannot order for every size: eager draws in memory order, "
            "and its functional form would draw in another",
            fix="draw into a fresh tensor instead: `t = torch.bernoulli(torch.full_like(t, p))`, or call "
                "`.contiguous()` on the tensor before the in-place draw")
    return None if order == list(range(len(order))) else order
