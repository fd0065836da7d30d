"""Load-time check: every node's recorded value agrees with what its inputs compute.

Each call is run again on the meta values of its arguments (cheap: no data) and the
result's dtype and (symbolic) shape are compared with the node's recorded meta['val'].
Common operators on static sizes are answered by meta_rules.py without a kernel (torch's
Python meta kernels import torch._dynamo on their first call, seconds of a fresh process).
A tampered or inconsistent graph is refused at load, with the node named, instead of
failing later inside a kernel.

An operator whose output sizes depend on data (`item`, `nonzero`, `masked_select` ...)
has no meta computation to compare with: its recorded value is accepted where it brings
in data-dependent symbols of the program's own, each introduced by one node only; every
use of those values downstream is checked as any other.
"""
from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Iterator

import torch
import torch.fx as fx

from .. import _torch
from ..errors import ArtifactError
from ..values import RuntimeValue
from .meta_rules import static_result

if TYPE_CHECKING:
    import sympy

    from ..capture.meta_cache import MetaCache
    from ..shapes.env import ShapeEnv

_META = torch.device("meta")


def check_graph(gm: fx.GraphModule, env: ShapeEnv | None) -> None:
    """`env`: the program's shape environment, if it has symbols (torch's Python meta
    kernels handle them, under capture's environment, as when the values were recorded).

    A static program's kernels run below autograd only, without capture or the shape
    algebra (sympy: a second of a fresh process), so loading one imports neither. Nothing
    else of capture's environment reaches an ATen kernel on static meta tensors: the Python
    dispatcher is on for symbolic sizes only; builtin max/min/divmod behave as the builtins
    on plain ints; the control-flow and TorchBind entry points are Python calls no ATen
    kernel makes (higher-order operators are not recomputed); and no meta kernel, reference
    or decomposition of torch reads the compiler flags."""
    if env is None:
        with _torch.below_autograd():
            _check(gm, None, _Introduced(set()))
        return
    from ..capture.environment import capture_environment
    from ..capture.meta_cache import MetaCache
    with assumptions_kept(env), capture_environment(None, symbolic=True):
        _check(gm, MetaCache(), _Introduced(set(env.unbacked.infos)))


@contextlib.contextmanager
def assumptions_kept(env: ShapeEnv | None) -> Iterator[None]:
    """Checking a loaded program asks questions about its sizes, which torch's meta kernels
    and the verifier may answer as if sizes were >= 2 where capture did not need to: that is
    a check of consistency, not the program's assumptions, which the archive records. `env`
    leaves with the assumptions it came with."""
    assumed = (dict(env.assumed_min), dict(env.assumption_sites)) if env is not None else None
    try:
        yield
    finally:
        if env is not None:
            env.assumed_min.clear()
            env.assumed_min.update(assumed[0])
            env.assumption_sites.clear()
            env.assumption_sites.update(assumed[1])


class _Introduced:
    """The data-dependent symbols met so far, and the node that brought each in."""

    def __init__(self, program_symbols: set[sympy.Symbol]):
        self.program_symbols = program_symbols
        self.by: dict[sympy.Symbol, str] = {}

    def accept(self, node: fx.Node) -> bool:
        """Whether `node`'s recorded value may stand without a recomputation: it brings in
        data-dependent symbols, none of them brought in before."""
        known = set().union(*(_symbols(a.meta.get("val")) for a in node.all_input_nodes))
        fresh = _symbols(node.meta["val"]) - known
        if not fresh or not fresh <= self.program_symbols:
            return False
        for sym in fresh:
            if self.by.setdefault(sym, node.name) != node.name:
                raise ArtifactError(f"node '{node.name}' records the data-dependent value {sym}, which node "
                                    f"'{self.by[sym]}' already computes: the graph was tampered with")
        return True


def _check(gm: fx.GraphModule, cache: MetaCache | None, introduced: _Introduced) -> None:
    """Layers repeat: with symbolic sizes, where each of a kernel's size questions costs
    sympy work, a call is recomputed once per distinct argument metadata (`cache`)."""
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            _check(getattr(gm, node.target), cache, introduced)
        if node.op != "call_function" or isinstance(node.target, _torch.HigherOrderOperator):
            continue
        if "val" not in node.meta:
            raise ArtifactError(f"node '{node.name}' has no recorded value (meta['val'])")
        if node.target in _RANGE_ASSERTIONS:
            _check_range_assertion(node)
            continue
        # recomputed on the meta device, where the recorded values' twins live
        args, kwargs = fx.node.map_aggregate((node.args, node.kwargs), _meta_value)
        try:
            got = static_result(node.target, args, kwargs)   # common operators on static sizes: no kernel
            if got is None:
                got = node.target(*args, **kwargs) if cache is None else \
                    cache.run(node.target, args, kwargs, lambda: node.target(*args, **kwargs))
        except Exception as e:   # the operator rejects its recorded arguments, or its sizes depend on data
            if _binds(node) and introduced.accept(node):
                continue
            raise ArtifactError(f"node '{node.name}' ({node.target}) cannot be recomputed from its inputs: "
                                f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None
        problem = _difference(node.meta["val"], got)
        if problem:
            raise ArtifactError(f"node '{node.name}' ({node.target}) records {problem}: the graph was tampered "
                                "with or is inconsistent")


def _binds(node: fx.Node) -> bool:
    """Whether the node's arguments bind to its operator's schema (no more positional
    arguments than it takes, known keywords, each argument once, every required one given):
    a data-dependent value stands unrecomputed only on a call that can run."""
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return True
    positional = [a for a in schema.arguments if not a.kwarg_only]
    if len(node.args) > len(positional):
        return False
    given = [a.name for a in positional[:len(node.args)]] + list(node.kwargs)
    names = {a.name for a in schema.arguments}
    if len(set(given)) != len(given) or not set(node.kwargs) <= names:
        return False
    if not all(a.name in given or a.has_default_value() for a in schema.arguments):
        return False
    values = {**dict(zip((a.name for a in positional), node.args)), **node.kwargs}
    return all(_fits(values[a.name], a.type) for a in schema.arguments if a.name in values)


def _fits(value: Any, jit_type: Any) -> bool:
    """Whether an argument can be passed where the schema wants `jit_type` (tensors, numbers
    and their optional and list forms are checked; other kinds are left to the operator)."""
    if isinstance(value, fx.Node):
        value = value.meta.get("val")
        if isinstance(value, RuntimeValue):
            value = value.gp_meta
    kind = jit_type.kind()
    if kind == "OptionalType":
        return value is None or _fits(value, jit_type.getElementType())
    if kind == "ListType":
        return isinstance(value, (list, tuple)) and all(_fits(v, jit_type.getElementType()) for v in value)
    wanted = _ARGUMENT_TYPES.get(kind)
    return wanted is None or isinstance(value, wanted) and not (isinstance(value, bool) and bool not in wanted)


_ARGUMENT_TYPES = {
    "TensorType": (torch.Tensor,),
    "IntType": (int, torch.SymInt), "SymIntType": (int, torch.SymInt),
    "FloatType": (float, int, torch.SymFloat, torch.SymInt),
    "BoolType": (bool, torch.SymBool),
}


# Run-time checks of a data-dependent value's range: on a symbolic value they would ask for
# its number, which only the run has. Nothing to recompute: they return nothing.
_RANGE_ASSERTIONS = frozenset({torch.ops.aten.sym_constrain_range.default,
                               torch.ops.aten.sym_constrain_range_for_size.default})


def _check_range_assertion(node: fx.Node) -> None:
    value = node.args[0] if node.args else None
    value = value.meta.get("val") if isinstance(value, fx.Node) else value
    if node.meta["val"] is not None or not isinstance(value, (int, torch.SymInt)) or len(node.args) != 1 \
            or not set(node.kwargs) <= {"min", "max"} \
            or not all(v is None or type(v) is int for v in node.kwargs.values()):
        raise ArtifactError(f"node '{node.name}' ({node.target}) is not a range check of one integer: the graph "
                            "was tampered with or is inconsistent")


def _meta_value(value: Any) -> Any:
    if isinstance(value, fx.Node):
        if "val" not in value.meta:
            raise ArtifactError(f"node '{value.name}' has no recorded value (meta['val'])")
        return _on_meta(value.meta["val"])
    return _META if isinstance(value, torch.device) else value


def _on_meta(val: Any) -> Any:
    """A recorded value with each RuntimeValue replaced by its meta twin (values are tensors,
    symbolic or plain scalars, or lists and tuples of them: walked directly, as this runs
    for every argument of every node)."""
    if isinstance(val, RuntimeValue):
        return val.gp_meta
    if type(val) in (list, tuple):
        return type(val)(_on_meta(v) for v in val)
    return val


def _difference(recorded: Any, computed: Any) -> str | None:
    if isinstance(recorded, torch.Tensor) or isinstance(computed, torch.Tensor):
        if not (isinstance(recorded, torch.Tensor) and isinstance(computed, torch.Tensor)):
            return f"a {type(recorded).__name__} where its inputs compute a {type(computed).__name__}"
        if recorded.dtype != computed.dtype:
            return f"dtype {recorded.dtype} where its inputs compute {computed.dtype}"
        if recorded.dim() != computed.dim() or any(not _same_size(a, b)
                                                   for a, b in zip(recorded.shape, computed.shape)):
            return f"shape {list(recorded.shape)} where its inputs compute {list(computed.shape)}"
        return None
    if isinstance(recorded, (list, tuple)) and isinstance(computed, (list, tuple)):
        if len(recorded) != len(computed):
            return f"{len(recorded)} results where its inputs compute {len(computed)}"
        for r, c in zip(recorded, computed):
            found = _difference(r, c)
            if found:
                return found
        return None
    if isinstance(recorded, (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool)) and \
            isinstance(computed, (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool)):
        return None if _same_size(recorded, computed) else f"the value {recorded} where its inputs compute {computed}"
    if recorded is None and computed is None:
        return None
    return f"a {type(recorded).__name__} where its inputs compute a {type(computed).__name__}"


def _same_size(a, b) -> bool:
    return _expr(a) == _expr(b)


def _expr(v):
    node = getattr(v, "node", None)
    if node is not None and hasattr(node, "expr"):
        expr = node.expr
        return int(expr) if expr.is_Integer else expr
    return v


def _symbols(value: Any) -> set[sympy.Symbol]:
    """The symbols in a recorded value's sizes (tensor shapes and strides, symbolic scalars)."""
    found: set[sympy.Symbol] = set()
    for leaf in _torch.pytree.tree_leaves(value):
        if isinstance(leaf, RuntimeValue):
            leaf = leaf.gp_meta
        sizes = [*leaf.shape, *leaf.stride(), leaf.storage_offset()] if isinstance(leaf, torch.Tensor) else [leaf]
        for s in sizes:
            expr = getattr(getattr(s, "node", None), "expr", None)
            found |= getattr(expr, "free_symbols", set())
    return found
