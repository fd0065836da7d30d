"""In-place writes whose elements share memory, with themselves or with the op's inputs.

The capture records an in-place op as its functional form: every element of the result is
computed from the values before the write. Eager writes element by element into memory:
where two elements of the written tensor are one memory location (an overlapping
`as_strided` window), or an input reads memory the op writes (`x.scatter_(1, i, x)`,
`x[1:].add_(x[:-1])`), eager either refuses (its memory-overlap checks) or answers with
values that depend on the order it visits the elements. Neither is the functional answer.

Meta tensors have no memory, so eager's checks do not run on them. This module rebuilds
the call at the example's concrete layouts on real tensors that share memory as the
program's do, asks eager, and says what to do: eager's error where eager raises, a refusal
where eager's answer depends on the order of its writes, nothing where no memory is shared.

Where sizes are symbolic, the example's layouts answer for the example only: two windows
disjoint there may meet at other sizes, and a window whose elements are apart there may
overlap itself elsewhere. So a symbolic layout is accepted only where the declared ranges
prove the answer for every size (`disjoint`, `apart`): the element offsets of two windows lie
in separate intervals, or both windows step by one common stride and, within one step, in
separate intervals (`x[:, :h]` and `x[:, h:]` of one tensor); a window's dimensions each step
past everything its smaller-stride dimensions span.
"""
from __future__ import annotations

import itertools
from typing import Any, Callable

import sympy
import torch

from ..op_args import arg_leaves, map_args
from ..shapes.expr import ValueRange, decide
from ..shapes.node import size_expr


class NoExampleLayout(Exception):
    pass


def _int(value: Any) -> int:
    if isinstance(value, torch.SymInt):
        if not value.node.has_hint():   # a data-dependent size
            raise NoExampleLayout
        return int(value.node.hint)
    return int(value)


def example_layout(meta: torch.Tensor) -> tuple[list[int], list[int], int]:
    return [_int(s) for s in meta.shape], [_int(s) for s in meta.stride()], _int(meta.storage_offset())


def _symbolic(meta: torch.Tensor) -> bool:
    return any(isinstance(v, torch.SymInt) for v in (*meta.shape, *meta.stride(), meta.storage_offset()))


def _addresses(sizes, strides, offset) -> torch.Tensor:
    """The storage offsets of a layout's elements, one per element."""
    at = torch.tensor([offset], dtype=torch.long)
    for n, s in zip(sizes, strides):
        at = (at.unsqueeze(-1) + torch.arange(n, dtype=torch.long) * s).flatten()
    return at


def _extent(sizes, strides, offset) -> int:
    return offset if 0 in sizes else offset + 1 + sum((n - 1) * s for n, s in zip(sizes, strides))


def _apart(sizes, strides) -> bool:
    """Whether each dimension steps past everything the smaller-stride ones span (enough to
    show no two elements share memory, without listing them)."""
    span = 0
    for n, s in sorted(((n, s) for n, s in zip(sizes, strides) if n > 1), key=lambda d: d[1]):
        if s <= span:
            return False
        span += (n - 1) * s
    return True


def _overlaps_itself(sizes, strides, offset) -> bool:
    if 0 in sizes or _apart(sizes, strides):
        return False
    at = _addresses(sizes, strides, offset)
    return at.unique().numel() != at.numel()


def _share(a, b) -> bool:
    if 0 in a[0] or 0 in b[0] or _extent(*a) <= b[2] or _extent(*b) <= a[2]:
        return False
    return bool(torch.isin(_addresses(*a), _addresses(*b)).any())


Layout = tuple[list[sympy.Expr], list[sympy.Expr], sympy.Expr]   # sizes, strides, storage offset


def symbolic_layout(meta: torch.Tensor) -> Layout:
    return [size_expr(s) for s in meta.shape], [size_expr(s) for s in meta.stride()], size_expr(meta.storage_offset())


def _same_expr(a: sympy.Expr, b: sympy.Expr) -> bool:
    return a == b or sympy.expand(a - b) == 0


def _same_layout(a: Layout, b: Layout) -> bool:
    return len(a[0]) == len(b[0]) and all(_same_expr(x, y) for x, y in zip([*a[0], *a[1], a[2]], [*b[0], *b[1], b[2]]))


def _span(sizes, strides, proves) -> sympy.Expr:
    """The largest element offset of a layout from its first element (strides >= 0). A size
    that may be 0 counts as 1 (`Max`): the window then has no element, so bounds that hold for
    size 1 hold; a size proven >= 1 counts as itself, which keeps sums of sizes decidable."""
    return sympy.Add(*[(n - 1 if proves(sympy.Ge(n, 1)) else sympy.Max(n - 1, 0)) * s for n, s in zip(sizes, strides)])


def disjoint(a: Layout, b: Layout, proves: Callable[[sympy.Basic], bool]) -> bool:
    """Whether the declared ranges prove that no element of window `a` is an element of
    window `b` at any size: their offsets lie in separate intervals, or, for a stride S both
    windows step by, each window's other dimensions stay within one step of S (so an offset
    tells its step and its place within the step), and there the windows are disjoint."""
    (sa, ta, oa), (sb, tb, ob) = a, b
    if not all(proves(sympy.Ge(t, 0)) for t in (*ta, *tb)):
        return False
    if proves(sympy.Lt(oa + _span(sa, ta, proves), ob)) or proves(sympy.Lt(ob + _span(sb, tb, proves), oa)):
        return True
    for i, step in enumerate(ta):
        for j, other in enumerate(tb):
            if not _same_expr(step, other) or not proves(sympy.Gt(step, 0)):
                continue
            inner_a = ([n for k, n in enumerate(sa) if k != i], [t for k, t in enumerate(ta) if k != i])
            inner_b = ([n for k, n in enumerate(sb) if k != j], [t for k, t in enumerate(tb) if k != j])
            ra, rb = _within_step(oa, step), _within_step(ob, step)
            if all(proves(sympy.Ge(r, 0)) and proves(sympy.Lt(r + _span(*inner, proves), step))
                   for r, inner in ((ra, inner_a), (rb, inner_b))) \
                    and disjoint((*inner_a, ra), (*inner_b, rb), proves):
                return True
    return False


def _within_step(offset: sympy.Expr, step: sympy.Expr) -> sympy.Expr:
    """`offset` less the whole steps it spells out (`2*W + h` by W: h); `offset` itself where
    it spells out none."""
    if offset.is_Integer and step.is_Integer:
        return offset % step
    if step.is_Number:
        return offset
    try:
        whole, rest = sympy.div(sympy.expand(offset), step)
    except (sympy.polys.polyerrors.BasePolynomialError, NotImplementedError, TypeError):
        return offset
    coefficients = [whole] if whole.is_Number else sympy.Poly(whole, *sorted(whole.free_symbols, key=str)).coeffs()
    if rest.free_symbols - offset.free_symbols or not all(c.is_integer for c in coefficients) \
            or not _same_expr(whole * step + rest, offset):
        return offset
    return rest


def apart(layout: Layout, example_strides: list[int] | None, proves: Callable[[sympy.Basic], bool]) -> bool:
    """Whether the declared ranges prove that no two elements of the window are one memory
    location at any size: in the order of the example's strides, each dimension that may hold
    more than one element steps past everything the ones before it span. Without an example
    (sizes that depend on tensor values), any order of up to 4 such dimensions may show it."""
    sizes = layout[0]
    dims = [d for d in range(len(sizes)) if not proves(sympy.Le(sizes[d], 1))]
    if example_strides is not None:
        return _apart_in_order(layout, sorted(dims, key=lambda d: example_strides[d]), proves)
    return len(dims) <= 4 and any(_apart_in_order(layout, list(order), proves) for order in itertools.permutations(dims))


def _apart_in_order(layout: Layout, dims: list[int], proves: Callable[[sympy.Basic], bool]) -> bool:
    sizes, strides, _ = layout
    span = sympy.Integer(0)
    for d in dims:
        if not proves(sympy.Gt(strides[d], span)):
            return False
        span = span + _span([sizes[d]], [strides[d]], proves)
    return True


class Sizes:
    """Proofs over the declared ranges of the layouts' symbols. A layout may be empty at the
    smallest sizes, where bounds on its offsets need not hold (a stride of 0, an offset past
    an empty window): each property is proven symbolically for the symbols at 2 and above,
    and at each of their values below 2 by substituting it, until a window is empty (which
    shares no memory) or no symbol is left below 2."""

    SMALL = 2

    def __init__(self, metas):
        self.env = next((v.node.env for meta in metas for v in (*meta.shape, *meta.stride(), meta.storage_offset())
                         if isinstance(v, torch.SymInt)), None)

    def proven(self, prop: Callable, layouts: list[Layout], fixed: frozenset = frozenset()) -> bool:
        """Whether `prop(layouts, proves)` holds at every size of the declared ranges."""
        if any(_is_zero(n) for layout in layouts for n in layout[0]):
            return True
        if self.env is None:
            return prop(layouts, lambda rel: rel is sympy.true)
        ranges = self.env.ranges
        symbols = set().union(*(e.free_symbols for layout in layouts for e in (*layout[0], *layout[1], layout[2])))
        small = sorted((s for s in symbols - fixed if s in ranges and ranges[s].lower < self.SMALL), key=str)
        raised = {**ranges, **{s: ValueRange(ranges[s].lower if s in fixed else max(ranges[s].lower, self.SMALL),
                                             ranges[s].upper) for s in symbols if s in ranges}}
        if not prop(layouts, lambda rel: decide(self.env.simplify(rel), raised) is True):
            return False
        for sym in small:
            for value in range(int(ranges[sym].lower), self.SMALL):
                pinned = [_substitute(layout, sym, value) for layout in layouts]
                if not self.proven(prop, pinned, fixed | {sym}):
                    return False
        return True


def _is_zero(e: sympy.Expr) -> bool:
    return e.is_Number and e == 0


def _substitute(layout: Layout, sym: sympy.Symbol, value: int) -> Layout:
    sizes, strides, offset = layout
    at = {sym: sympy.Integer(value)}
    return [n.xreplace(at) for n in sizes], [t.xreplace(at) for t in strides], offset.xreplace(at)


def check(func, written: list, windows: list, inputs: Any, args: tuple, kwargs: dict, base_of: Callable,
          meta_of: Callable, is_tracer: Callable) -> tuple[str, str] | None:
    """("eager", eager's message) where eager raises a memory-overlap error on this call,
    ("order", why) where eager's answer depends on the order of its writes or graphport
    cannot tell at every size, None where the functional form gives eager's answer.
    `inputs`: the arguments the call reads, the written ones left out (a reader that is the
    written tensor itself overlaps it fully: eager allows that for elementwise ops only).
    `windows`: the written tensors whose own elements may share memory (views through
    `as_strided`; writes through expand and unfold are judged where they are written back)."""
    written = [w for w in written if is_tracer(w)]
    written_bases = {id(base_of(w)) for w in written}
    readers = [t for t in arg_leaves(inputs) if is_tracer(t) and id(base_of(t)) in written_bases]
    sharing = [*written, *readers]
    shapes = {id(t): symbolic_layout(meta_of(t)) for t in sharing}
    sizes = Sizes([meta_of(t) for t in sharing])

    def sharers(r):
        return [w for w in written if id(base_of(r)) == id(base_of(w))]

    # a reader that is the written tensor, or the same window of its memory at every size
    full = [r for r in readers if any(r is w or _same_layout(shapes[id(r)], shapes[id(w)]) for w in sharers(r))]
    partial = [r for r in readers if not any(r is f for f in full)]
    proven_apart = [r for r in partial if all(sizes.proven(lambda ls, proves: disjoint(*ls, proves),
                                                            [shapes[id(r)], shapes[id(w)]]) for w in sharers(r))]
    try:
        layouts = {id(t): example_layout(meta_of(t)) for t in sharing}
    except NoExampleLayout:
        if any(not any(r is w for w in written) for r in readers if not any(r is p for p in proven_apart)):
            return "order", ("an input of the call shares memory with the tensor it writes, at sizes that depend "
                             "on tensor values")
        if any(not sizes.proven(lambda ls, proves: apart(ls[0], None, proves), [shapes[id(w)]]) for w in windows
               if id(w) in shapes):
            return "order", ("the written tensor is a window of memory whose elements may be one memory location, "
                             "at sizes that depend on tensor values")
        return None
    self_overlap, self_unsettled = [], []
    for w in windows:
        if id(w) not in layouts:
            continue
        if _overlaps_itself(*layouts[id(w)]):
            self_overlap.append(w)
        elif _symbolic(meta_of(w)) and not sizes.proven(
                lambda ls, proves, example=layouts[id(w)][1]: apart(ls[0], example, proves), [shapes[id(w)]]):
            self_unsettled.append(w)
    unproven = [r for r in partial if not any(r is p for p in proven_apart)]
    overlapping = [r for r in unproven
                   if any(layouts[id(r)] != layouts[id(w)] and _share(layouts[id(r)], layouts[id(w)]) for w in sharers(r))]
    unsettled = [r for r in unproven if _symbolic(meta_of(r)) or any(_symbolic(meta_of(w)) for w in sharers(r))]
    if not self_overlap and not self_unsettled and not overlapping and not unsettled and not full:
        return None
    message = _eager_error(func, args, kwargs, sharing, layouts, base_of, meta_of, is_tracer)
    if message is not None:
        return "eager", message
    if not self_overlap and not self_unsettled and not overlapping and not unsettled:
        return None   # a reader that is the written tensor itself, which eager allows here
    if self_overlap:
        return "order", "several elements of the written tensor are one memory location"
    if overlapping:
        return "order", "an input of the call reads memory the call writes"
    if self_unsettled:
        return "order", ("the written tensor is a window of memory whose elements may be one memory location "
                         "at other sizes")
    return "order", ("an input of the call shares memory with the tensor it writes, and whether they overlap "
                     "depends on the sizes")


def _eager_error(func, args, kwargs, sharing, layouts, base_of, meta_of, is_tracer) -> str | None:
    """Eager's memory-overlap error on real tensors with the example's layouts, sharing
    memory as the program's tensors do (the other tensors are zeros: valid indices)."""
    storages = {}
    for t in sharing:
        key = id(base_of(t))
        dtype, extent = meta_of(t).dtype, _extent(*layouts[id(t)])
        have = storages.get(key)
        if have is not None and have[0] != dtype:
            return None   # views of one storage as different dtypes: not rebuilt
        storages[key] = (dtype, max(extent, have[1] if have else 0))
    memory = {key: torch.zeros(max(n, 1), dtype=dtype) for key, (dtype, n) in storages.items()}

    def real(a):
        if not is_tracer(a):
            return a
        meta = meta_of(a)
        if id(base_of(a)) in memory and id(a) in layouts:
            return memory[id(base_of(a))].as_strided(*layouts[id(a)])
        sizes, strides, offset = example_layout(meta)
        return torch.zeros(max(_extent(sizes, strides, offset), 1), dtype=meta.dtype).as_strided(
            sizes, strides, offset)

    try:
        real_args, real_kwargs = map_args(real, (args, kwargs))
    except NoExampleLayout:
        return None
    try:
        with torch.no_grad():
            func(*real_args, **real_kwargs)
    except RuntimeError as e:
        text = str(e).strip()
        return text.splitlines()[0] if "memory location" in text else None
    except (ValueError, TypeError, IndexError, NotImplementedError):
        return None
    return None
