"""SymNode: our symbolic values behind `torch.SymInt` / `SymBool` / `SymFloat`.

torch calls these methods by name (the C++ `PythonSymNodeImpl` and the magic methods
installed on `torch.SymInt`), so that meta kernels compute output shapes as sympy
expressions over our symbols. `expr`, `_hint` and `shape_env` are read by torch's
Python shape helpers; `ShapeEnvAdapter` answers the two ShapeEnv questions they ask.
"""
from __future__ import annotations

import sympy
import torch

from ..errors import UnsupportedFeatureError
from .env import ShapeEnv
from .expr import FloorDiv, Mod


class SymNode:
    def __init__(self, expr: sympy.Basic, env: ShapeEnv, pytype: type):
        self._expr = expr
        self.env = env
        self.pytype = pytype
        self.shape_env = ShapeEnvAdapter(env)

    # -- what torch reads -----------------------------------------------------------------

    @property
    def expr(self) -> sympy.Basic:
        return self.env.simplify(self._expr)

    @property
    def _hint(self):
        return self.env.hint_of(self._expr)

    hint = _hint

    def is_int(self) -> bool:
        return self.pytype is int

    def is_float(self) -> bool:
        return self.pytype is float

    def is_bool(self) -> bool:
        return self.pytype is bool

    def is_nested_int(self) -> bool:
        return False

    def has_hint(self) -> bool:
        return True

    def is_symbolic(self) -> bool:
        return True

    def is_constant(self) -> bool:
        return False

    constant = None

    def maybe_as_int(self):
        expr = self.expr
        return int(expr) if expr.is_Integer else None

    def maybe_as_float(self):
        return None

    def maybe_as_bool(self):
        expr = self.expr
        return bool(expr) if expr in (sympy.true, sympy.false) else None

    def str(self) -> str:
        return str(self.expr)

    _graph_repr = str

    def __str__(self) -> str:
        return str(self.expr)

    def __repr__(self) -> str:
        return f"SymNode({self.expr})"

    # -- constants ------------------------------------------------------------------------

    def _new(self, expr, pytype) -> "SymNode":
        return SymNode(expr, self.env, pytype)

    def wrap_int(self, num: int) -> "SymNode":
        return self._new(sympy.Integer(num), int)

    def wrap_float(self, num: float) -> "SymNode":
        return self._new(sympy.Float(num), float)

    def wrap_bool(self, num: bool) -> "SymNode":
        return self._new(sympy.true if num else sympy.false, bool)

    def clone(self) -> "SymNode":
        return self

    # -- arithmetic -----------------------------------------------------------------------

    def _arith(self, other: "SymNode", fn) -> "SymNode":
        pytype = float if float in (self.pytype, other.pytype) else int
        return self._new(self.env.memo(fn, self.expr, other.expr), pytype)

    def add(self, other):
        return self._arith(other, lambda a, b: a + b)

    def sub(self, other):
        return self._arith(other, lambda a, b: a - b)

    def mul(self, other):
        return self._arith(other, lambda a, b: a * b)

    def floordiv(self, other):
        if float in (self.pytype, other.pytype):
            return self._new(sympy.floor(self.expr / other.expr), float)
        return self._new(FloorDiv(self.expr, other.expr), int)

    int_floordiv = floordiv

    def mod(self, other):
        return self._arith(other, lambda a, b: Mod(a, b))

    def truediv(self, other):
        return self._new(self.expr / other.expr, float)

    int_truediv = float_truediv = truediv

    def pow(self, other):
        return self._arith(other, lambda a, b: a ** b)

    pow_by_natural = float_pow = pow

    def sym_sum(self, others):
        return self._new(sympy.Add(*[o.expr for o in others]), int)

    def sym_max(self, other):
        return self._arith(other, sympy.Max)

    def sym_min(self, other):
        return self._arith(other, sympy.Min)

    def neg(self):
        return self._new(-self.expr, self.pytype)

    def pos(self):
        return self

    def abs(self):
        return self._new(sympy.Abs(self.expr), self.pytype)

    def floor(self):
        return self._new(sympy.floor(self.expr), int)

    def ceil(self):
        return self._new(sympy.ceiling(self.expr), int)

    def trunc(self):
        return self._new(sympy.floor(self.expr), int)

    def sym_float(self):
        return self._new(self.expr, float)

    def sym_int(self):
        return self._new(self.expr, int)

    def sym_sqrt(self):
        return self._new(sympy.sqrt(self.expr), float)

    def _unsupported(self, what: str):
        raise UnsupportedFeatureError(
            f"the program applies {what} to a symbolic size ({self.expr}), which graphport cannot express yet",
            fix="compute sizes with +, -, *, // and %, or mark the dimension static")

    def round(self, ndigits=None):
        self._unsupported("round()")

    def sym_log2(self):
        self._unsupported("log2")

    def is_integer(self):
        self._unsupported("float.is_integer()")

    def bitwise_and(self, other):
        self._unsupported("a bitwise and")

    def bitwise_or(self, other):
        self._unsupported("a bitwise or")

    def bitwise_xor(self, other):
        self._unsupported("a bitwise xor")

    xor = bitwise_xor

    def lshift(self, other):
        self._unsupported("a left shift")

    def rshift(self, other):
        self._unsupported("a right shift")

    # -- comparisons and logic --------------------------------------------------------------

    def _rel(self, other, fn) -> "SymNode":
        a, b = self.expr, other.expr
        if a == b:
            return self.wrap_bool(fn in (sympy.Eq, sympy.Le, sympy.Ge))
        if a.is_Number and b.is_Number:
            return self._new(fn(a, b), bool)
        # Unevaluated: sympy's own evaluation is slow, and the env decides relations anyway.
        return self._new(fn(a, b, evaluate=False), bool)

    def eq(self, other):
        return self._rel(other, sympy.Eq)

    def ne(self, other):
        return self._rel(other, sympy.Ne)

    def lt(self, other):
        return self._rel(other, sympy.Lt)

    def le(self, other):
        return self._rel(other, sympy.Le)

    def gt(self, other):
        return self._rel(other, sympy.Gt)

    def ge(self, other):
        return self._rel(other, sympy.Ge)

    def sym_and(self, other):
        a, b = self.expr, other.expr
        if a is sympy.false or b is sympy.false:
            return self.wrap_bool(False)
        return other if a is sympy.true else self if b is sympy.true else self._new(sympy.And(a, b), bool)

    def sym_or(self, other):
        a, b = self.expr, other.expr
        if a is sympy.true or b is sympy.true:
            return self.wrap_bool(True)
        return other if a is sympy.false else self if b is sympy.false else self._new(sympy.Or(a, b), bool)

    and_, or_ = sym_and, sym_or

    def sym_not(self):
        return self._new(sympy.Not(self.expr), bool)

    def sym_ite(self, then, otherwise):
        return then if self.bool_() else otherwise

    # -- answers (these record guards) ----------------------------------------------------------

    def guard_bool(self, file: str = "", line: int = 0) -> bool:
        return self.env.evaluate(self.expr)

    bool_ = guard_bool

    def guard_or_false(self, file: str = "", line: int = 0) -> bool:
        """Kernels ask this for fast paths where False is always a valid answer: no guard."""
        found = self.env.static_value(self.expr)
        return False if found is None else found

    def guard_or_true(self, file: str = "", line: int = 0) -> bool:
        found = self.env.static_value(self.expr)
        return True if found is None else found

    def guard_size_oblivious(self, file: str = "", line: int = 0) -> bool:
        """Answered as if every size were at least 2, guarding only if that does not settle it."""
        found = self.env.static_value(self.expr)
        return self.env.evaluate(self.expr) if found is None else found

    def expect_true(self, file: str = "", line: int = 0) -> bool:
        return self.env.evaluate(self.expr)

    def statically_known_true(self, file: str = "", line: int = 0) -> bool:
        return self.env.static_value(self.expr) is True

    def guard_int(self, file: str = "", line: int = 0) -> int:
        return self.env.specialize(self.expr)

    int_ = guard_int

    def guard_float(self, file: str = "", line: int = 0) -> float:
        return float(self.env.hint_of(self.expr))

    # -- layout questions (asked by TensorImpl for symbolic sizes) ---------------------------

    def _layout(self, sizes, strides, order) -> "SymNode":
        return self.wrap_bool(_strides_follow(self.env, sizes, strides, order))

    def is_contiguous(self, sizes, strides):
        return self._layout(sizes, strides, list(range(len(sizes) - 1, -1, -1)))

    def is_channels_last_contiguous_2d(self, sizes, strides):
        return self._layout(sizes, strides, [1, 3, 2, 0]) if len(sizes) == 4 else self.wrap_bool(False)

    def is_channels_last_contiguous_3d(self, sizes, strides):
        return self._layout(sizes, strides, [1, 4, 3, 2, 0]) if len(sizes) == 5 else self.wrap_bool(False)

    is_channels_last_strides_2d = is_channels_last_contiguous_2d
    is_channels_last_strides_3d = is_channels_last_contiguous_3d

    def is_non_overlapping_and_dense(self, sizes, strides):
        order = sorted(range(len(sizes)), key=lambda i: self.env.hint_of(strides[i].expr))
        return self._layout(sizes, strides, order)


def _strides_follow(env: ShapeEnv, sizes, strides, order) -> bool:
    """Whether strides are dense in `order` (innermost dimension first), deciding with guards."""
    expected = sympy.Integer(1)
    for d in order:
        size = sizes[d].expr
        if env.evaluate(sympy.Eq(size, 1)):
            continue
        if not env.evaluate(sympy.Eq(strides[d].expr, expected)):
            return False
        expected = expected * size
    return True


class ShapeEnvAdapter:
    """The ShapeEnv questions torch's Python shape helpers ask of `node.shape_env`."""

    def __init__(self, env: ShapeEnv):
        self.env = env

    def _maybe_evaluate_static(self, expr, **kwargs):
        found = self.env.static_value(expr)
        return None if found is None else sympy.true if found else sympy.false

    def evaluate_sym_node(self, node, size_oblivious=False, fallback_value=None):
        if fallback_value is not None:   # guard_or_false / guard_or_true: the default needs no guard
            found = self.env.static_value(node.expr)
            return fallback_value if found is None else found
        return self.env.evaluate(node.expr)

    def guarding_hint_or_throw(self, expr):
        return self.env.hint_of(expr)

    def optimization_hint(self, expr, fallback=None):
        return self.env.hint_of(expr)

    def size_hint(self, expr, allow_none=False):
        return self.env.hint_of(expr)


def symint(expr: sympy.Expr, env: ShapeEnv) -> torch.SymInt | int:
    expr = env.simplify(expr)
    if expr.is_Integer:
        return int(expr)
    return torch.SymInt(SymNode(expr, env, int))


