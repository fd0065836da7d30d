"""The dynamic-shapes spec API, as torch.export's: Dim, dims, derived dims, ShapesCollection."""
from __future__ import annotations

import inspect
import re
from typing import Any

import sympy

from .. import _torch
from ..errors import InvalidDimError, UnsupportedInputError

INT_OO = sympy.oo


class _DimHint:
    """Dim.AUTO / Dim.DYNAMIC / Dim.STATIC: a dimension's kind without a name; each may be
    called for bounds, `Dim.DYNAMIC(min=2, max=64)`, as in torch.export (a static dim keeps
    the example's size, so STATIC's bounds have no effect, as in torch)."""

    def __init__(self, kind: str, min: int | None = None, max: int | None = None):
        self.kind, self.min, self.max = kind, min, max

    def __call__(self, *, min: int | None = None, max: int | None = None) -> "_DimHint":
        lo, hi = 0 if min is None else min, INT_OO if max is None else max
        if not isinstance(lo, int) or (hi is not INT_OO and not isinstance(hi, int)) or lo < 0 or lo > hi:
            raise InvalidDimError(f"Dim.{self.kind} has an invalid range min={min}, max={max}",
                                  fix="use integers with 0 <= min <= max")
        return _DimHint(self.kind, min, max)

    @property
    def range(self) -> tuple[int, Any]:
        """(lowest, highest) size the hint allows (torch's default: [0, inf]). As for a named
        Dim, the capture assumes sizes of at least 2 and the small-size proof then settles 0 and
        1; the program's range says where it is valid (torch.export reports [2, inf] whatever
        the program does at 0 and 1)."""
        return (self.min or 0, INT_OO if self.max is None else self.max)

    def __repr__(self) -> str:
        bounds = [f"{k}={v}" for k, v in (("min", self.min), ("max", self.max)) if v is not None]
        return f"Dim.{self.kind}" + (f"({', '.join(bounds)})" if bounds else "")


class Dim:
    """A named dynamic dimension with an inclusive range, shared by every input dim it marks."""

    AUTO = _DimHint("AUTO")        # dynamic where possible: specialized or related as tracing requires
    DYNAMIC = _DimHint("DYNAMIC")  # must stay dynamic: an error if tracing specializes it
    STATIC = _DimHint("STATIC")    # static: the example's size

    def __init__(self, name: str, *, min: int | None = None, max: int | None = None):
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_]\w*", name):
            raise InvalidDimError(f"Dim name {name!r} is not a Python identifier",
                                        fix="name dims like variables: Dim('batch')")
        lo = 0 if min is None else min
        hi = INT_OO if max is None else max
        if not isinstance(lo, int) or (hi is not INT_OO and not isinstance(hi, int)) or lo < 0 or lo > hi:
            raise InvalidDimError(f"Dim('{name}') has an invalid range min={min}, max={max}",
                                        fix="use integers with 0 <= min <= max")
        self.__name__ = name
        self.min = lo
        self.max = hi

    @property
    def name(self) -> str:
        return self.__name__

    def __add__(self, other: int) -> "DerivedDim":
        return DerivedDim(self, 1, 0) + other

    __radd__ = __add__

    def __sub__(self, other: int) -> "DerivedDim":
        return DerivedDim(self, 1, 0) - other

    def __mul__(self, other: int) -> "DerivedDim":
        return DerivedDim(self, 1, 0) * other

    __rmul__ = __mul__

    def __repr__(self) -> str:
        args = [repr(self.name)]
        if self.min != 0:
            args.append(f"min={self.min}")
        if self.max is not INT_OO:
            args.append(f"max={self.max}")
        return f"Dim({', '.join(args)})"


class DerivedDim:
    """`coeff * root + offset`: a dimension defined by another (dx + 1, 2 * dx, 2 * dx + 1)."""

    def __init__(self, root: Dim, coeff: int, offset: int):
        self.root, self.coeff, self.offset = root, coeff, offset

    def _check(self, other) -> int:
        if not isinstance(other, int):
            raise UnsupportedInputError(f"derived dims take integer arithmetic only, got {other!r}",
                                        fix="write dims like dx + 1, 2 * dx or 2 * dx + 1")
        return other

    def __add__(self, other: int) -> "DerivedDim":
        return DerivedDim(self.root, self.coeff, self.offset + self._check(other))

    __radd__ = __add__

    def __sub__(self, other: int) -> "DerivedDim":
        return DerivedDim(self.root, self.coeff, self.offset - self._check(other))

    def __mul__(self, other: int) -> "DerivedDim":
        k = self._check(other)
        if k <= 0:
            raise UnsupportedInputError("derived dims must scale by a positive integer",
                                        fix="write 2 * dx, not 0 * dx or -dx")
        return DerivedDim(self.root, self.coeff * k, self.offset * k)

    __rmul__ = __mul__

    @property
    def min(self) -> int:
        return self.coeff * self.root.min + self.offset

    @property
    def max(self):
        return INT_OO if self.root.max is INT_OO else self.coeff * self.root.max + self.offset

    @property
    def name(self) -> str:
        text = self.root.name if self.coeff == 1 else f"{self.coeff}*{self.root.name}"
        if self.offset:
            text += f" + {self.offset}" if self.offset > 0 else f" - {-self.offset}"
        return text

    def __repr__(self) -> str:
        return self.name


def dims(*names: str, min: int | None = None, max: int | None = None) -> tuple[Dim, ...]:
    """Several Dims with the same range: `batch, seq = dims("batch", "seq", max=512)`."""
    return tuple(Dim(n, min=min, max=max) for n in names)


class ShapesCollection:
    """Dynamic shapes keyed by the input tensors themselves: `sc[x] = {0: batch}`."""

    def __init__(self):
        self._by_id: dict[int, tuple[Any, Any]] = {}

    def __setitem__(self, tensor, spec) -> None:
        self._by_id[id(tensor)] = (tensor, spec)

    def __getitem__(self, tensor):
        return self._by_id[id(tensor)][1]

    def __contains__(self, tensor) -> bool:
        return id(tensor) in self._by_id

    def spec_for(self, tensor):
        entry = self._by_id.get(id(tensor))
        return None if entry is None else entry[1]

    def dynamic_shapes(self, model, args: tuple, kwargs: dict | None = None) -> dict[str, Any]:
        """The equivalent spec keyed by argument name, as torch.export's ShapesCollection gives
        it; graphport.export accepts it as dynamic_shapes."""
        pytree = _torch.pytree
        named = _by_argument_name(model, tuple(args), dict(kwargs or {}))
        return {name: pytree.tree_map(lambda t: self.spec_for(t) if hasattr(t, "shape") else None, value)
                for name, value in named.items()}


class AdditionalInputs:
    """Several sets of example inputs; each dimension whose size differs between them is
    dynamic (Dim.DYNAMIC), the others static, and so is a Python int whose value differs (a
    dynamic int, as torch.export infers it). `export` also checks that the program it
    captured accepts every set."""

    def __init__(self):
        self.examples: list[tuple[tuple, dict]] = []

    def add(self, args: tuple, kwargs: dict | None = None) -> None:
        if not isinstance(args, tuple):
            raise UnsupportedInputError(f"AdditionalInputs.add expects args as a tuple, got a "
                                        f"{type(args).__qualname__}", fix="wrap a single input: add((x,))")
        self.examples.append((args, dict(kwargs or {})))

    def dynamic_shapes(self, model, args: tuple, kwargs: dict | None = None) -> dict[str, Any]:
        pytree = _torch.pytree
        sets = [(tuple(args), dict(kwargs or {})), *self.examples]
        flat, spec = pytree.tree_flatten(sets[0])
        others = []
        for extra in sets[1:]:
            leaves, extra_spec = pytree.tree_flatten(extra)
            if extra_spec != spec:
                raise UnsupportedInputError(
                    "the additional inputs are structured unlike the example inputs",
                    fix="give every input set the same arguments, keywords, containers and tensor ranks")
            others.append(leaves)
        specs = []
        for i, leaf in enumerate(flat):
            if type(leaf) is int:
                specs.append(Dim.DYNAMIC if any(o[i] != leaf for o in others) else None)
                continue
            if not hasattr(leaf, "shape"):
                specs.append(None)
                continue
            shapes = [tuple(leaf.shape)] + [tuple(o[i].shape) for o in others]
            if len({len(s) for s in shapes}) != 1:
                raise UnsupportedInputError(f"input leaf {i} has different ranks across the additional inputs",
                                            fix="give every input set tensors of the same rank")
            specs.append({d: Dim.DYNAMIC for d in range(len(shapes[0])) if len({s[d] for s in shapes}) > 1}
                         or None)
        positional, keyword = pytree.tree_unflatten(specs, spec)
        return _by_argument_name(model, positional, keyword)


def _by_argument_name(model, args: tuple, kwargs: dict) -> dict[str, Any]:
    """{argument name: value} for a call of `model`, as torch.export keys specs."""
    target = model.forward if hasattr(model, "forward") else model
    try:
        params = list(inspect.signature(target).parameters.values())
    except (TypeError, ValueError):
        params = []
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    var = next((p.name for p in params if p.kind is p.VAR_POSITIONAL), "args")
    names = [positional[i] if i < len(positional) else f"{var}_{i - len(positional)}" for i in range(len(args))]
    return {**dict(zip(names, args)), **kwargs}
