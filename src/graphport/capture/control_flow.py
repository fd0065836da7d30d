"""Control flow: cond, map, while_loop and scan captured as one higher-order node each,
whose branches or bodies are subgraphs.

Each branch or body is traced in a child scope of the scope recording the call (scope.py): the
operands become the child graph's first placeholders, and what the branch closes over
(parameters, buffers, outer tensors, sizes) is lifted in as further placeholders as it is
used. The node passes the operands, then every lifted value (the true branch's first, in
the order used), which is how torch.export lays a cond out; both branches take the same
placeholders. The branches are checked against each other (output structure, dtype, rank,
sizes), for writes to anything they did not create, and for outputs that alias an input.
Each becomes a GraphModule attribute (`true_graph_0`, `false_graph_0`, `body_graph_0`, ...)
of the graph that holds the call, reached by `get_attr`, so nested conds nest their modules.
Loop bodies (map, while_loop, scan) see fresh placeholders for what changes per iteration
(slices, carried values), so a closure over the initial tensor still reads the initial one;
values carried around a loop must keep their shape and dtype.
"""
from __future__ import annotations

import contextlib

import inspect
from dataclasses import dataclass
from typing import Any, Callable

import sympy
import torch
import torch.fx as fx

from .. import _torch
from ..errors import ControlFlowError, OperatorError
from ..ops.kinds import Kind, op_info
from ..shapes.branch_facts import decide_given
from ..shapes.expr import bounds
from . import data_dependent
from .data_dependent import bind_output_sizes
from ..source import SourceLocation, stack_trace_formatter
from .scope import Scope
from .sizes import is_sym
from .tracer import TracerTensor, describe

pytree = _torch.pytree
COND = torch.ops.higher_order.cond
MAP = torch.ops.higher_order.map_impl
WHILE_LOOP = torch.ops.higher_order.while_loop
SCAN = torch.ops.higher_order.scan


@dataclass
class Subgraph:
    """A traced branch or body: its graph, before its placeholders are made to agree."""
    role: str                       # "true branch", "false branch", ...
    where: str                      # the function and where it is defined, for messages
    scope: Scope
    operands: list[fx.Node]         # its operand placeholders, in order
    lifted: dict[fx.Node, fx.Node]  # outer node -> its placeholder, in lifting order
    outputs: list[TracerTensor]
    out_spec: Any


def capture_cond(mode, pred, true_fn: Callable, false_fn: Callable, operands=()) -> Any:
    """The capture rule for torch.ops.higher_order.cond."""
    rec = mode.rec
    pred_arg = _predicate(rec, pred)
    if isinstance(pred_arg, bool):   # sizes settle it: the branch taken, inline, as for a Python bool
        with mode:
            return (true_fn if pred_arg else false_fn)(*operands)
    flat, spec = pytree.tree_flatten(tuple(operands))
    flat = [_tracer(rec, t) if isinstance(t, torch.Tensor) else t for t in flat]
    outer = [rec.graph_arg(t) for t in flat]

    def call(fn, inner):
        return fn(*pytree.tree_unflatten(list(inner), spec))
    known = _known_symbols(rec)
    true = trace_subgraph(mode, "true branch", true_fn, flat, outer, call)
    false = trace_subgraph(mode, "false branch", false_fn, flat, outer, call)
    _check_branches_agree(rec, true, false)
    agreed = _SizesAgree(rec, pred.node.expr if is_sym(pred) else None)
    fresh = _branch_dependent_sizes(mode, true, false, known, agreed)
    if not fresh:
        _check_layouts_agree(rec, true, false, agreed)
    lifted = _lifted_union([true, false])
    true_attr = _attach(rec, "true_graph", finish_subgraph(true, lifted, rec))
    false_attr = _attach(rec, "false_graph", finish_subgraph(false, lifted, rec))
    val = _cond_values(true, false, fresh, agreed)
    node = rec.node(COND, (pred_arg, true_attr, false_attr, tuple(outer) + tuple(lifted)), {}, val)
    _finish_node(rec, node, (true_attr, false_attr))
    device = true.outputs[0].device if true.outputs else torch.device("cpu")
    outs = rec.wrap(val, node, device)
    bind_output_sizes(mode, outs, [(sym, i, d) for (i, d), (sym, _) in fresh.items()])
    return pytree.tree_unflatten(list(outs), true.out_spec)


def _known_symbols(rec) -> int:
    """How many data-dependent symbols exist before the branches are traced: those made
    later were made inside a branch and are bound there, out of the cond's graph's reach."""
    return len(rec.sizes.env.unbacked.infos) if rec.sizes is not None else 0


class _SizesAgree:
    """Whether a size (or stride) of a true-branch output and of the false-branch output agree
    wherever the program can run, and which of the two the cond's output carries.

    On a size predicate P, the true branch runs only where P holds: its size `a` and the
    false branch's `b` agree when they are the same expression, or when P makes them equal
    (`16` and `h*w` where P is `h*w == 16`); the output then carries `b`, which is right on
    both sides. Symmetrically, `a` when not-P makes them equal."""

    def __init__(self, rec, predicate: sympy.Basic | None):
        self.rec = rec
        self.predicate = predicate

    def pick(self, a, b):
        """The size the cond's output carries, or None where the branches disagree."""
        if _same_size(self.rec, a, b):
            return a
        if self.predicate is None or self.rec.sizes is None:
            return None
        env = self.rec.sizes.env
        equal = sympy.Eq(_expr(a), _expr(b))
        if decide_given(equal, (self.predicate,) + env.branch_facts, env.ranges) is True:
            return b
        if decide_given(equal, (sympy.Not(self.predicate),) + env.branch_facts, env.ranges) is True:
            return a
        return None


def _branch_dependent_sizes(mode, true: Subgraph, false: Subgraph, known: int, agreed: _SizesAgree) -> dict:
    """(output, dim) -> (fresh symbol, its SymInt) for each output size the branch taken
    decides: sizes that differ between the branches, and sizes computed inside a branch
    (data-dependent there). As torch does, each becomes a data-dependent size of the cond's
    output, ranging over what either branch can give, bound to `sym_size` of the output."""
    rec = mode.rec
    inner = set(list(rec.sizes.env.unbacked.infos)[known:]) if rec.sizes is not None else set()
    fresh = {}
    for i, (a, b) in enumerate(zip(true.outputs, false.outputs)):
        for d, (sa, sb) in enumerate(zip(a.shape, b.shape)):
            if agreed.pick(sa, sb) is not None and not (_symbols(sa) | _symbols(sb)) & inner:
                continue
            env = data_dependent.shape_env(mode)
            lows, highs = zip(*(bounds(_expr(s), env.ranges) for s in (sa, sb)))
            sym = env.unbacked.new(int, max(min(lows), 0), max(highs),
                                   f"the size of torch.cond's output {i} along dimension {d} (the branch taken "
                                   f"decides it: {sa} or {sb})", size_like=True)
            fresh[(i, d)] = (sym, data_dependent.sym_int(env, sym))
    if fresh:
        for i in sorted({i for i, _ in fresh}):
            for sub in (true, false):
                _require_contiguous(rec, sub, i)
    return fresh


def _require_contiguous(rec, sub: Subgraph, i: int) -> None:
    """An output whose size the branch decides gets contiguous strides of its new shape
    (what torch gives it), so each branch must return it contiguous."""
    t = sub.outputs[i]
    expected = 1
    for size, stride in reversed(list(zip(t.shape, t.stride()))):
        if not _same_size(rec, size, 1) and not _same_size(rec, stride, expected):
            raise ControlFlowError(
                f"torch.cond's output {i} has a size that depends on the branch taken, and the {sub.role} "
                f"({sub.where}) returns it with a non-contiguous layout (strides {list(t.stride())})",
                fix=f"return output {i} contiguous from both branches: `return out.contiguous()`")
        expected = expected * size


def _cond_values(true: Subgraph, false: Subgraph, fresh: dict, agreed: _SizesAgree) -> tuple:
    """The cond node's `val`: the true branch's outputs, with each branch-dependent size
    replaced by its fresh symbol, and each size or stride the predicate makes agree taken as
    `agreed` picks it (the one valid on both sides)."""
    vals = []
    for i, (t, f) in enumerate(zip(true.outputs, false.outputs)):
        if not any(k[0] == i for k in fresh):
            shape = [agreed.pick(a, b) for a, b in zip(t.shape, f.shape)]
            stride = [agreed.pick(a, b) for a, b in zip(t.stride(), f.stride())]
            if list(shape) == list(t.shape) and list(stride) == list(t.stride()):
                vals.append(t.gp_meta)
            else:
                vals.append(torch.empty_strided(shape, [s if s is not None else ts for s, ts in
                                                        zip(stride, t.stride())], dtype=t.dtype, device="meta"))
            continue
        shape = [fresh[(i, d)][1] if (i, d) in fresh else s for d, s in enumerate(t.shape)]
        vals.append(torch.empty(shape, dtype=t.dtype, device="meta"))
    return tuple(vals)


def _expr(size) -> sympy.Expr:
    return size.node.expr if is_sym(size) else sympy.Integer(size)


def _symbols(size) -> set:
    return _expr(size).free_symbols


def capture_map(mode, fn: Callable, xs: list, args: list) -> Any:
    """The capture rule for torch.ops.higher_order.map_impl: `fn` traced once on a slice of
    each mapped tensor (plus the extra operands), its outputs stacked along a new first dim."""
    rec = mode.rec
    xs = [_tracer(rec, t) for t in xs]
    args = [_tracer(rec, t) if isinstance(t, torch.Tensor) else t for t in args]
    length = xs[0].shape[0]
    if not is_sym(length) and length == 0:
        raise ControlFlowError(
            f"map runs over a zero-length leading dimension (mapped input {describe(xs[0])})",
            fix="map needs at least one slice: check the length before calling map, or export with an example "
                "whose leading dimension is at least 1")
    slices = [TracerTensor(_slice_meta(t), t.device, rec.graph_arg(t).name) for t in xs]
    outer = [rec.graph_arg(t) for t in xs] + [rec.graph_arg(a) for a in args]
    body = trace_subgraph(mode, "map body", fn, slices + args, outer, lambda f, inner: f(*inner))
    attr = _attach(rec, "body_graph", finish_subgraph(body, list(body.lifted), rec))
    val = tuple(torch.empty((length, *t.shape), dtype=t.dtype, device="meta") for t in body.outputs)
    lifted = list(body.lifted)
    node = rec.node(MAP, (attr, outer[:len(xs)], outer[len(xs):] + lifted), {}, val)
    _finish_node(rec, node, (attr,))
    device = body.outputs[0].device if body.outputs else xs[0].device
    return pytree.tree_unflatten(list(rec.wrap(val, node, device)), body.out_spec)


def capture_while_loop(mode, cond_fn: Callable, body_fn: Callable, carried: tuple, additional: tuple = ()) -> Any:
    """The capture rule for torch.ops.higher_order.while_loop: the loop condition and body
    each traced once on fresh values shaped like the carried ones (each iteration's are
    new values, so the body must not see the initial ones), what they close over lifted."""
    rec = mode.rec
    carried = [_carried_tracer(rec, t, "while_loop") for t in carried]
    additional = [_tracer(rec, t) if isinstance(t, torch.Tensor) else t for t in additional]
    outer = [rec.graph_arg(t) for t in carried] + [rec.graph_arg(a) for a in additional]

    def fresh():
        return [TracerTensor(_copy_meta(t.gp_meta), t.device, rec.graph_arg(t).name) for t in carried] + additional
    call = lambda f, inner: f(*inner)   # noqa: E731
    condition = trace_subgraph(mode, "while_loop condition", cond_fn, fresh(), outer, call, bare_output=True)
    body = trace_subgraph(mode, "while_loop body", body_fn, fresh(), outer, call)
    if len(condition.outputs) != 1 or condition.outputs[0].dtype != torch.bool \
            or condition.outputs[0].gp_meta.numel() != 1:
        raise ControlFlowError(
            f"the while_loop condition ({condition.where}) must return one bool tensor with one element, got "
            f"{', '.join(describe(t) for t in condition.outputs) or 'nothing'}",
            fix="return a comparison: `lambda i, x: i < 10` with i a tensor")
    _check_carried(rec, body, carried, "while_loop body")
    lifted = _lifted_union([condition, body])
    cond_attr = _attach(rec, "while_loop_cond_graph", finish_subgraph(condition, lifted, rec))
    body_attr = _attach(rec, "while_loop_body_graph", finish_subgraph(body, lifted, rec))
    val = tuple(_copy_meta(t.gp_meta) for t in carried)
    node = rec.node(WHILE_LOOP, (cond_attr, body_attr, tuple(outer[:len(carried)]),
                                 tuple(outer[len(carried):]) + tuple(lifted)), {}, val)
    _finish_node(rec, node, (cond_attr, body_attr))
    return tuple(rec.wrap(val, node, carried[0].device if carried else torch.device("cpu")))


def capture_scan(mode, combine_fn: Callable, init: list, xs: list, additional: tuple = ()) -> Any:
    """The capture rule for torch.ops.higher_order.scan: `combine_fn` traced once on fresh
    carries shaped like `init` and one slice of each scanned tensor; it returns the new
    carries, then per-step outputs that are stacked along a new first dimension."""
    rec = mode.rec
    init = [_carried_tracer(rec, t, "scan") for t in init]
    xs = [_tracer(rec, t) for t in xs]
    additional = [_tracer(rec, t) if isinstance(t, torch.Tensor) else t for t in additional]
    outer = [rec.graph_arg(t) for t in init + xs] + [rec.graph_arg(a) for a in additional]
    inner = ([TracerTensor(_copy_meta(t.gp_meta), t.device, rec.graph_arg(t).name) for t in init]
             + [TracerTensor(_slice_meta(t), t.device, rec.graph_arg(t).name) for t in xs] + additional)
    body = trace_subgraph(mode, "scan combine_fn", combine_fn, inner, outer, lambda f, args: f(*args))
    _check_carried(rec, body, init, "scan combine_fn")
    _check_carried_strides(body, init)
    lifted = list(body.lifted)
    attr = _attach(rec, "scan_combine_graph", finish_subgraph(body, lifted, rec))
    length = xs[0].shape[0]
    val = tuple(_copy_meta(t.gp_meta) for t in init) + tuple(
        torch.empty((length, *t.shape), dtype=t.dtype, device="meta") for t in body.outputs[len(init):])
    node = rec.node(SCAN, (attr, outer[:len(init)], outer[len(init):len(init) + len(xs)],
                           tuple(outer[len(init) + len(xs):]) + tuple(lifted)), {}, val)
    _finish_node(rec, node, (attr,))
    outs = rec.wrap(val, node, init[0].device)
    return pytree.tree_unflatten(list(outs), body.out_spec)


def _finish_node(rec, node: fx.Node, attrs: tuple) -> None:
    rec.user_calls.add(node)
    for attr in attrs:
        attr.meta.update({k: v for k, v in node.meta.items() if k in ("gp_stack", "nn_module_stack")})


def _carried_tracer(rec, t, what: str) -> TracerTensor:
    if not isinstance(t, torch.Tensor):
        raise ControlFlowError(
            f"{what} carries a {type(t).__qualname__} ({t!r}); graphport captures carried tensors only",
            fix="carry a tensor instead: torch.tensor(value)")
    return _tracer(rec, t)


def _check_carried(rec, body: Subgraph, carried: list, what: str) -> None:
    """The body returns a new value for each carried one, of the same dtype and shape."""
    if len(body.outputs) < len(carried):
        raise ControlFlowError(
            f"the {what} ({body.where}) returns {len(body.outputs)} tensors for {len(carried)} carried values",
            fix="return one new value for every carried value, in the same order")
    for i, (new, old) in enumerate(zip(body.outputs, carried)):
        if new.dtype != old.dtype or new.dim() != old.dim() \
                or not all(_same_size(rec, a, b) for a, b in zip(new.shape, old.shape)):
            raise ControlFlowError(
                f"the {what} ({body.where}) changes carried value {i} from {describe(old)} to {describe(new)}; "
                "a loop must carry values of one shape and dtype",
                fix="keep each carried value's shape and dtype (convert with .to(dtype), pad or slice to the "
                    "carried shape), or collect growing results outside the loop")


def _check_carried_strides(body: Subgraph, init: list) -> None:
    """torch's scan also requires each new carry to have the strides of a clone of its initial
    value, and raises otherwise. At a size-1 dimension the two can differ where they agree at
    larger sizes (a pointwise result is laid out contiguously there, a clone keeps the
    initial value's strides), so eager raises at that size only. Checked where the layouts
    are concrete: a static capture, and the traces at pinned small sizes, which then refuse
    that size as eager does."""
    for i, (new, old) in enumerate(zip(body.outputs, init)):
        layout = (*old.shape, *old.stride(), *new.stride())
        if not all(type(v) is int for v in layout):
            continue
        expected = torch.empty_strided(old.shape, old.stride(), dtype=old.dtype, device="meta").clone().stride()
        if tuple(new.stride()) != tuple(expected):
            raise OperatorError(
                f"scan: the combine_fn ({body.where}) returns carried value {i} with strides {tuple(new.stride())} "
                f"where its initial value (cloned) has strides {tuple(expected)}, at sizes {tuple(old.shape)}; "
                "torch's scan requires init and carry to have the same metadata",
                fix="this call fails the same way in eager PyTorch; make the carried value contiguous in both "
                    "places (init.contiguous() and a .contiguous() result in combine_fn)")


def _copy_meta(meta: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(meta.shape, meta.stride(), dtype=meta.dtype, device="meta")


def _tracer(rec, t):
    return t if isinstance(t, TracerTensor) else rec.constant(t)


def _slice_meta(t: TracerTensor) -> torch.Tensor:
    """Metadata of `t[i]`: one slice along the first dimension."""
    meta = t.gp_meta
    return torch.empty_strided(meta.shape[1:], meta.stride()[1:], dtype=meta.dtype, device="meta")


def _predicate(rec, pred) -> Any:
    """The predicate as a graph value: a bool tensor's node, a size comparison's node, or
    the bool the sizes settle it to."""
    if isinstance(pred, torch.Tensor):
        pred = _tracer(rec, pred)
        if pred.dtype != torch.bool or pred.gp_meta.numel() != 1:
            raise ControlFlowError(
                f"torch.cond's predicate is a {describe(pred)} tensor; it must be a bool tensor with one element",
                fix="compare to make the predicate: torch.cond(x.sum() > 0, ...), or reduce it with .any() / .all()")
        return rec.value(pred)
    if is_sym(pred):
        return rec.sym_value(pred)
    return bool(pred)


def trace_subgraph(mode, role: str, fn: Callable, inner: list, outer: list, call: Callable[[list], Any],
                   bare_output: bool = False) -> Subgraph:
    """Run `call(fn, inner)` in a child scope whose placeholders stand for `inner` (named
    after the `outer` graph values); refuse writes to outer values and outputs that alias
    inputs. `bare_output`: the graph returns its one output itself, not in a tuple (a
    while_loop condition, as torch's operator expects)."""
    rec = mode.rec
    where = _describe_fn(fn)
    with rec.child_scope() as scope:
        placeholders = []
        for t, node in zip(inner, outer):
            ph = scope.graph.placeholder(node.name if isinstance(node, fx.Node) else "arg")
            ph.meta["val"] = t.gp_meta if isinstance(t, TracerTensor) else t
            if isinstance(t, TracerTensor) and scope.bound_here(t) is None:
                scope.bind(t, ph, t.gp_base.gp_version if t.gp_base is not None else t.gp_version)
            elif isinstance(node, fx.Node) and node not in scope.sizes:
                scope.sizes[node] = ph   # a SymInt operand: its uses inside read the placeholder
            placeholders.append(ph)
        # the operator's dispatch left the mode; the function runs under it again, and under the
        # mode that answers (here: refuses) its reads of autograd state
        with mode, rec.state_reads if rec.state_reads is not None else contextlib.nullcontext():
            out = call(fn, inner)
        flat_out, out_spec = pytree.tree_flatten(out)
        for i, leaf in enumerate(flat_out):
            if not isinstance(leaf, TracerTensor):
                raise ControlFlowError(
                    f"the {role} ({where}) returns a {type(leaf).__qualname__} at output {i}; branches and bodies "
                    "must return tensors", fix="return tensors only (wrap a number with torch.tensor(...) made "
                                               "from the operands, or compute it outside the branch)")
        _refuse_writes(scope, role, where)
        _refuse_aliases(scope, flat_out, role, where)
        values = tuple(rec.output_value(t) for t in flat_out)
        scope.graph.output(values[0] if bare_output and len(values) == 1 else values)
    lifted = {scope.lifted_from[ph]: ph for _, ph in scope.lifted}
    return Subgraph(role, where, scope, placeholders, lifted, flat_out, out_spec)


def _describe_fn(fn: Callable) -> str:
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    try:
        code = inspect.unwrap(target).__code__
    except AttributeError:
        return getattr(fn, "__name__", type(fn).__name__)
    return f"{code.co_name} at {SourceLocation(code.co_filename, code.co_firstlineno, code.co_name)}"


def _refuse_writes(scope: Scope, role: str, where: str) -> None:
    """A value bound outside the branch and rebound inside it was written in place."""
    for tensor, node in scope.rebound():
        if tensor.gp_base is not None or node.op == "placeholder" or scope.parent.find(tensor) is None:
            continue   # a view is replayed from its base when stale; writes through one rebind its base
        raise ControlFlowError(
            f"the {role} ({where}) writes in place into {tensor.gp_label}, a tensor it did not create "
            "(an operand, a parameter or buffer, or a tensor from outside); branches and loop bodies must be "
            "functional", fix="compute a new tensor instead (`y = x + 1` rather than `x.add_(1)`) and return it; "
                              "update buffers outside the branch with its result")


def _refuse_aliases(scope: Scope, outputs: list[TracerTensor], role: str, where: str) -> None:
    for i, t in enumerate(outputs):
        root = t.gp_base if t.gp_base is not None else t
        found = scope.bound_here(root)
        if _computed_alias(scope, t, root):
            continue
        # an operand (a carried value or a scanned slice stands for one by a placeholder of its own)
        # or a tensor from outside: torch's operators refuse outputs aliasing their inputs, in eager too
        if (found is not None and found.op == "placeholder") or (scope.parent.find(root) is not None and found is None):
            raise ControlFlowError(
                f"the {role} ({where}) returns {'an operand or outer tensor' if root is t else 'a view of an input'} "
                f"at output {i} ({root.gp_label}), not a new tensor; branch outputs must not alias their inputs",
                fix=f"return a copy: `{root.gp_label}.clone()`" if root is t else
                    "return a copy of the view: `....clone()`")
    seen: dict[int, int] = {}
    for i, t in enumerate(outputs):   # two outputs sharing memory: a later write to one would miss the other
        root = t.gp_base if t.gp_base is not None else t
        if id(root) in seen:
            raise ControlFlowError(
                f"the {role} ({where}) returns outputs {seen[id(root)]} and {i} that share memory (the same tensor "
                "or views of one); outputs of a branch or body must be distinct tensors",
                fix=f"return a copy for one of them: `out{i}.clone()`")
        seen[id(root)] = i


def _computed_alias(scope: Scope, t: TracerTensor, root: TracerTensor) -> bool:
    """An operator that returns its input in eager but is valued by a fresh node (eval
    dropout's `clone`, capture/mode.py alias_computed_as): the graph returns a new tensor, as
    torch.export's does, not a view of the operand."""
    own = scope.bound_here(t) if t is not root else None
    return (own is not None and own.op == "call_function" and isinstance(own.target, _torch.OpOverload)
            and op_info(own.target).kind is not Kind.VIEW)


def _check_layouts_agree(rec, true: Subgraph, false: Subgraph, agreed: _SizesAgree) -> None:
    """Code after the cond is captured with the true branch's strides (they decide later
    view-or-copy choices); the false branch must give the same layout, or a view the
    capture chose could fail on its output at run time."""
    for i, (a, b) in enumerate(zip(true.outputs, false.outputs)):
        for d, (sa, sb, size) in enumerate(zip(a.stride(), b.stride(), a.shape)):
            if not _same_size(rec, size, 1) and agreed.pick(sa, sb) is None:
                raise ControlFlowError(
                    f"torch.cond's branches return output {i} with different memory layouts: strides "
                    f"{list(a.stride())} from the {true.role}, {list(b.stride())} from the {false.role}",
                    fix=f"make output {i} contiguous in both branches: `return out.contiguous()`")


def _check_branches_agree(rec, true: Subgraph, false: Subgraph) -> None:
    if true.out_spec != false.out_spec:
        raise ControlFlowError(
            f"torch.cond's branches return different structures:\n  the {true.role} ({true.where}) returns "
            f"{_tree(true.out_spec)}\n  the {false.role} ({false.where}) returns {_tree(false.out_spec)}",
            fix="return the same structure (same number and nesting of tensors) from both branches")
    for i, (a, b) in enumerate(zip(true.outputs, false.outputs)):
        if a.dtype != b.dtype or a.dim() != b.dim():
            raise ControlFlowError(
                f"torch.cond's branches return different tensors at output {i}: the {true.role} returns "
                f"{describe(a)}, the {false.role} {describe(b)}",
                fix="make both branches return the same dtype and number of dimensions (convert with "
                    ".to(dtype), reshape with .reshape(...))")


def _same_size(rec, a, b) -> bool:
    if not is_sym(a) and not is_sym(b):
        return a == b
    ea = a.node.expr if is_sym(a) else sympy.Integer(a)
    eb = b.node.expr if is_sym(b) else sympy.Integer(b)
    return sympy.expand(rec.sizes.env.simplify(ea - eb)) == 0


def _tree(spec) -> str:
    return " ".join(str(spec).split())


def _lifted_union(subgraphs: list[Subgraph]) -> list[fx.Node]:
    """Outer values any of the subgraphs lifted, each once, first use first."""
    seen: dict[fx.Node, None] = {}
    for sub in subgraphs:
        seen.update(dict.fromkeys(sub.lifted))
    return list(seen)


def finish_subgraph(sub: Subgraph, lifted: list[fx.Node], rec) -> torch.nn.Module:
    """The subgraph as a module holding its graph: placeholders operands then `lifted` (one
    for each, used or not, so all subgraphs of a node take the same arguments), source
    locations in torch's format, values capture made for itself and nobody uses removed.
    It becomes a GraphModule when the program's module is built (`program_module`): code is
    generated once per graph, and never for a trace that is only compared."""
    from .dead_code import eliminate_dead_code
    graph = sub.scope.graph
    first = next((n for n in graph.nodes if n.op != "placeholder"), None)
    order = list(sub.operands)
    for outer in lifted:
        ph = sub.lifted.get(outer)
        if ph is None:
            with graph.inserting_before(first):
                ph = graph.placeholder(outer.name)
            ph.meta["val"] = outer.meta["val"]
        order.append(ph)
    for ph in order:
        first.prepend(ph)
        ph.target = ph.name   # the argument's name: unique even where two stand for one outer value
    eliminate_dead_code(graph, rec.user_calls)
    formatted = stack_trace_formatter()
    for node in graph.nodes:
        stack = node.meta.pop("gp_stack", None)
        if stack is not None:
            node.meta["stack_trace"] = formatted(stack)
    holder = subgraph_owner(sub.scope.modules)
    holder.graph = graph
    graph.owning_module = holder
    return holder


def _attach(rec, prefix: str, module: torch.nn.Module) -> fx.Node:
    """`module` as the next free `<prefix>_<n>` attribute of the recording scope's graph."""
    scope = rec.scope
    n = sum(name.startswith(prefix + "_") for name in scope.modules)
    name = f"{prefix}_{n}"
    scope.modules[name] = module
    return scope.graph.get_attr(name)


def subgraph_owner(modules: dict[str, torch.nn.Module]) -> torch.nn.Module:
    """A module holding subgraphs as attributes, for fx.GraphModule to copy them from."""
    owner = torch.nn.Module()
    for name, module in modules.items():
        owner.add_module(name, module)
    return owner


def attach_subgraphs(graph: fx.Graph, modules: dict[str, fx.GraphModule]) -> None:
    """Give a captured graph an owning module holding its subgraphs, so passes that compare
    graphs reach them from `get_attr` nodes (node.graph.owning_module), and export builds
    the program's GraphModule from it. A plain module: generating the graph's code here
    would be wasted on every re-trace that is only compared."""
    if modules:
        graph.owning_module = subgraph_owner(modules)


def program_module(graph: fx.Graph) -> fx.GraphModule:
    """The program's GraphModule, each subgraph made a GraphModule in turn from the top.
    Each generates its Python code on first call or first read of `.code`, not here: an
    exported program is often printed, saved, lowered or converted before it runs, and code
    generation was a fifth of a static export (a cond's branches included)."""
    gm = _torch.lazy_graph_module(graph.owning_module or torch.nn.Module(), graph)
    _subgraphs_to_graph_modules(gm)
    return gm


def _subgraphs_to_graph_modules(module: torch.nn.Module) -> None:
    for name, child in list(module.named_children()):
        if not isinstance(child, fx.GraphModule) and isinstance(getattr(child, "graph", None), fx.Graph):
            sub = _torch.lazy_graph_module(child, child.graph)
            setattr(module, name, sub)
            _subgraphs_to_graph_modules(sub)
