"""Small sizes proven operator by operator, without tracing the program again.

Capture may answer a size question assuming a dynamic size is at least 2, and then has to
prove the smaller sizes in range (passes/small_sizes.py does it by tracing the whole program
again at each of them). Most such answers are given while one operator's output metadata is
worked out: a broadcast asks whether the batch is 1, a view's strides whether a dimension is 1.
Their only effect is that operator's output shapes and strides, so they are proven by working
that metadata out again at the small size and comparing. A third kind of answer is one a
`contiguous()`, `reshape` or `flatten` call makes choosing between a view and a copy: the values
are the same either way, so it needs no proof unless the program later writes in place into the
result or its source (an alias at size 1, a copy at size 2). A read of strides or an offset
by the program is an ordinary assumption (`layout_read`): eager's may differ at small sizes.

The whole program is traced again only when some assumption was made anywhere else (in the
program's own code, in a composite kernel deciding which operators to run), when a proof here
fails, or when a metadata computation cannot be repeated in isolation; then every deferred
assumption becomes an ordinary one, proven by that trace.

Strides of dimensions of size 1 address nothing: they are not compared (eager's may differ
from ours there at the small size, as they may between two eager kernels).
"""
from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import sympy
import torch

from ..shapes.env import ShapeEnv
from ..shapes.node import SymNode
from ..source import SourceLocation, innermost_user_location
from .tracer import TracerTensor


@dataclass(frozen=True)
class TensorLayout:
    """A tensor argument or result as size expressions: what a metadata computation reads."""
    shape: tuple
    stride: tuple
    offset: Any
    storage_elements: Any
    dtype: torch.dtype
    device: torch.device
    requires_grad: bool


@dataclass
class MetadataCall:
    """One operator's metadata computation that assumed sizes at least 1 or 2."""
    kind: str          # "meta": run_meta (cached); "view": run_meta uncached; "kept": a kept composite;
                       # "inferred": `func` is graphport's own size computation (a reshape's -1)
    func: Any
    args: Any
    kwargs: Any
    out: Any
    symbols: frozenset  # every symbol its arguments' sizes use
    location: SourceLocation | None = None   # the user's line that first made it
    # the symbols its computation assumed large: every other symbol's questions were settled
    # by the declared ranges, which hold at its small sizes too, so pinning only those
    # symbols leaves the computation, and its metadata, as recorded
    assumed: frozenset = frozenset()

    def affected_by(self, pins) -> bool:
        """Whether pinning these symbols can change what this computation decides."""
        return not self.assumed.isdisjoint(pins)


@dataclass
class LocalVerdicts:
    """What the operator-by-operator proof settled, size by size, for the symbols whose
    sizes no decision outside a metadata computation assumed anything about, when it could
    not prove them all: the small sizes it proved, the ones where an operator the program
    reaches there rejects its arguments (eager fails there too), and the combinations of
    proven sizes it proved. The rest is left to the re-trace (passes/small_sizes.py)."""
    valid: dict = field(default_factory=dict)      # symbol -> small sizes proven, largest first
    refused: dict = field(default_factory=dict)    # (symbol, size) -> (reason, user's line)
    combinations: list = field(default_factory=list)   # {symbol: size} proven together


@dataclass
class DeferredAssumptions:
    """Where the capture's environment sends the assumptions made inside a metadata
    computation or a view-or-copy choice (ShapeEnv.deferral), and what proves them."""
    env: ShapeEnv
    metadata_min: dict = field(default_factory=dict)   # symbol -> least size a metadata computation assumed
    layout_min: dict = field(default_factory=dict)     # symbol -> least size a view-or-copy choice assumed
    sites: dict = field(default_factory=dict)          # symbol -> the user's line that first needed it
    calls: dict = field(default_factory=dict)          # key -> MetadataCall to repeat at the small sizes
    unprovable: str | None = None                      # why the operator-by-operator proof cannot hold
    verdicts: LocalVerdicts | None = None              # set by settle where not everything was proven
    # (symbol, least) -> how many calls were remembered when a decision outside them first
    # assumed that symbol at least that large: the calls eager makes before that decision
    ordinary_from: dict = field(default_factory=dict)
    _frames: list = field(default_factory=list)        # assumptions of each metadata computation running
    _choices: list = field(default_factory=list)       # assumptions of each view-or-copy choice running
    _ambiguous: set = field(default_factory=set)       # id() of tensors that may alias at a small size
    _sizes: dict = field(default_factory=dict)         # memo of _describe's size descriptions

    # -- receiving assumptions (ShapeEnv._decide) ---------------------------------------------

    def take(self, sym: sympy.Symbol, least: int, location: SourceLocation | None) -> bool:
        """Keep an assumption for a proof here (True), or leave it to the env (False)."""
        if self._frames:
            for frame in self._frames:
                frame[sym] = max(frame.get(sym, 0), least)
        elif self._choices:
            self._choices[-1][sym] = max(self._choices[-1].get(sym, 0), least)
            self.layout_min[sym] = max(self.layout_min.get(sym, 0), least)
        else:
            return False
        if sym not in self.sites:
            self.sites[sym] = location or innermost_user_location()
        return True

    def ordinary(self, sym: sympy.Symbol, least: int) -> None:
        """A decision outside a metadata computation assumed `sym >= least` (the env keeps it)."""
        self.ordinary_from.setdefault((sym, least), len(self.calls))

    def replay(self, assumed: dict) -> None:
        """A cached metadata answer brings along the assumptions it was computed under."""
        for sym, least in assumed.items():
            self.take(sym, least, None)

    def current(self) -> dict:
        return dict(self._frames[-1]) if self._frames else {}

    # -- metadata computations (capture/mode.py) ---------------------------------------------

    @contextlib.contextmanager
    def metadata_of(self, kind: str, func, args, kwargs) -> Iterator[list]:
        """Run one operator's metadata computation; the list yielded takes its result."""
        with _pushed(self._frames) as (frame, result):
            yield result
        if frame and result and not self._frames:   # an inner one is proven with the outermost
            self._remember(kind, func, args, kwargs, result[0], frame)

    def _remember(self, kind: str, func, args, kwargs, out, frame: dict) -> None:
        for sym, least in frame.items():
            self.metadata_min[sym] = max(self.metadata_min.get(sym, 0), least)
        if self.unprovable:
            return
        try:
            described = _describe((args, kwargs), self.env, self._sizes)
            key = (kind, func, _hashable(described))
            if key not in self.calls:
                self.calls[key] = MetadataCall(kind, func, described[0], described[1],
                                               _describe(out, self.env, self._sizes),
                                               frozenset(symbols_of(described)), innermost_user_location(),
                                               frozenset(frame))
            else:
                self.calls[key].assumed |= frame.keys()
        except _NotRepeatable as e:
            self.unprovable = f"the metadata of {func} cannot be worked out again in isolation ({e})"

    # -- view-or-copy choices (capture/torch_fn.py) -------------------------------------------

    @contextlib.contextmanager
    def choice(self, source) -> Iterator[list]:
        """A call that returns a view or a copy of `source` depending on its layout; the list
        yielded takes its result. A choice that needed an assumption makes both tensors ones
        whose aliasing may differ at a small size."""
        with _pushed(self._choices) as (frame, result):
            yield result
        if frame:
            for t in (source, *(result[:1])):
                if isinstance(t, TracerTensor):
                    self._ambiguous.add(id(t.gp_base if t.gp_base is not None else t))

    def written(self, target) -> None:
        """An in-place write: into a tensor whose aliasing may differ, it tells them apart."""
        if self._ambiguous and isinstance(target, TracerTensor) \
                and id(target.gp_base if target.gp_base is not None else target) in self._ambiguous:
            self.unprovable = "the program writes in place into a tensor that is a view at some sizes and a copy at others"

    def layout_read(self, tensor) -> None:
        """The program reads a tensor's strides or storage offset. At sizes 0 and 1 eager's may
        differ from the recorded expressions where they address nothing (a new tensor's strides
        use max(size, 1); an expand of a size-1 dimension keeps its stride), and the program
        may compute with them: every size of the tensor is assumed at least 2 (at most its
        example), so the re-trace proves the small sizes with eager's values."""
        if not isinstance(tensor, torch.Tensor):
            return
        meta = tensor.gp_meta if isinstance(tensor, TracerTensor) else tensor
        env = self.env
        for value in (*meta.shape, *meta.stride(), meta.storage_offset()):
            node = getattr(value, "node", None)
            for sym in getattr(getattr(node, "expr", None), "free_symbols", ()):
                info = env.symbols.get(sym)
                least = min(2, max(info.hint, 1)) if info is not None else 0
                if info is not None and sym not in env.exact and info.declared.lower < least \
                        and env.assumed_min.get(sym, 0) < least:
                    self.ordinary(sym, least)
                    env.assumed_min[sym] = least
                    env.assumption_sites[sym] = innermost_user_location()

    # -- settling ----------------------------------------------------------------------------

    def settle(self, proven: Callable[["DeferredAssumptions"], bool],
               by_size: Callable[["DeferredAssumptions", set], LocalVerdicts] | None = None) -> None:
        """Keep the deferred assumptions as proven if `proven(self)` says so; else make them
        the env's own, for the re-trace to prove. Done once, after capture; the proof of them
        all is not tried when the re-trace is needed anyway. Then `by_size(self, local)` settles
        what it can size by size (`verdicts`; `local`: the symbols no other decision assumed
        anything about), so that the re-trace is made only for the rest."""
        env = self.env
        env.deferral = None
        deferred = {s: max(self.layout_min.get(s, 0), self.metadata_min.get(s, 0))
                    for s in {*self.layout_min, *self.metadata_min}}
        if not deferred:
            return
        if not self.unprovable and not env.assumed_min and proven(self):
            env.proven_min.update(deferred)
            self.verdicts = _every_size_valid(deferred, env)
            return
        if by_size is not None and not self.unprovable:
            self.verdicts = by_size(self, set(deferred) - set(env.assumed_min))
        for sym, least in deferred.items():
            if env.assumed_min.get(sym, 0) < least:
                env.assumed_min[sym] = least
                env.assumption_sites.setdefault(sym, self.sites.get(sym))


def _every_size_valid(deferred: dict, env: ShapeEnv) -> LocalVerdicts:
    """The verdicts of a proof of all the deferred assumptions at once: every small size of
    each symbol, and every combination of them, proven (a re-trace at one pinned size reports
    them, so the combinations with that size need no trace: passes/small_sizes.py)."""
    valid = {s: list(range(least - 1, env.symbols[s].declared.lower - 1, -1)) for s, least in deferred.items()}
    valid = {s: sizes for s, sizes in valid.items() if sizes}
    return LocalVerdicts(valid, {}, [dict(zip(valid, sizes)) for sizes in itertools.product(*valid.values())])


@contextlib.contextmanager
def _pushed(frames: list) -> Iterator[tuple[dict, list]]:
    """A new frame of assumptions on `frames` while the block runs, and a list for its result."""
    frame: dict = {}
    frames.append(frame)
    try:
        yield frame, []
    finally:
        frames.pop()


# -- describing arguments as size expressions --------------------------------------------------------

class _NotRepeatable(Exception):
    pass


def _expr(v, env: ShapeEnv):
    if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        node = v.node
        if not isinstance(node, SymNode) or node.env is not env or (node.recipe is not None and not node.exact):
            raise _NotRepeatable(f"a size computed through floats: {v}")
        expr = env.simplify(node.expr)
        if any(s not in env.symbols for s in expr.free_symbols):
            raise _NotRepeatable(f"a data-dependent size: {expr}")
        return ("S", type(v), expr)
    return v


def _describe(value, env: ShapeEnv, sizes: dict | None = None):
    """`value` with its tensors as TensorLayouts and its sizes as ("S", type, expression).
    `sizes` memoizes the description of each size (layer after layer the same expressions
    come back): a description is a function of the expression and the env's replacements
    alone, so they are part of its key; a size that cannot be described is not memoized."""
    sizes = {} if sizes is None else sizes

    def size(v):
        node = getattr(v, "node", None)
        if not isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)) or not isinstance(node, SymNode) \
                or node.env is not env or (node.recipe is not None and not node.exact):
            return _expr(v, env)
        key = (type(v), node.expr, len(env.replacements))
        found = sizes.get(key)
        if found is None:
            found = sizes[key] = _expr(v, env)
        return found

    def elements(meta):
        """The storage's size in elements (nbytes // element size), memoized by the bytes' expression."""
        nbytes, width = meta.untyped_storage().nbytes(), max(meta.element_size(), 1)
        node = getattr(nbytes, "node", None)
        if not isinstance(node, SymNode) or node.env is not env:
            return size(nbytes // width)
        key = ("elements", node.expr, width, len(env.replacements))
        found = sizes.get(key)
        if found is None:
            found = sizes[key] = size(nbytes // width)
        return found

    def one(v):
        if isinstance(v, torch.Tensor):
            meta = v.gp_meta if isinstance(v, TracerTensor) else v
            return TensorLayout(tuple(size(s) for s in meta.shape), tuple(size(s) for s in meta.stride()),
                                size(meta.storage_offset()), elements(meta), meta.dtype, v.device,
                                v.requires_grad)
        if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return size(v)
        if isinstance(v, (list, tuple)):
            return type(v)(one(x) for x in v) if not hasattr(v, "_fields") else tuple(one(x) for x in v)
        if isinstance(v, dict):
            return {k: one(x) for k, x in v.items()}
        if v is None or isinstance(v, (bool, int, float, str, torch.dtype, torch.device, torch.layout,
                                       torch.memory_format)):
            return v
        raise _NotRepeatable(f"an argument of type {type(v).__name__}")
    return one(value)


def _hashable(value):
    """A description as a dict key that tells apart what the computation tells apart:
    containers tagged with their type, Python numbers with theirs (as keys True, 1 and 1.0
    are one, as arguments they are not: `x + True` and `x + 1` on a bool tensor give other
    dtypes; a float by its repr, so that -0.0 is not 0.0)."""
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_hashable(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple(sorted((k, _hashable(v)) for k, v in value.items())))
    return scalar_key(value)


def scalar_key(value):
    """A Python scalar as a key that tells True, 1 and 1.0 apart (see _hashable)."""
    if type(value) in (bool, int):
        return (type(value).__name__, value)
    if type(value) is float:
        return ("float", repr(value))
    return value


def symbols_of(value) -> set:
    found: set = set()

    def visit(v):
        if isinstance(v, tuple) and len(v) == 3 and v[0] == "S":
            found.update(v[2].free_symbols)
        elif isinstance(v, TensorLayout):
            for part in (*v.shape, *v.stride, v.offset, v.storage_elements):
                visit(part)
        elif isinstance(v, (list, tuple)):
            for x in v:
                visit(x)
        elif isinstance(v, dict):
            for x in v.values():
                visit(x)
    visit(value)
    return found


def at_pins(expr, pins: dict) -> sympy.Basic:
    return sympy.expand(sympy.sympify(expr).xreplace(pins))
