"""SymNode: our symbolic values behind `torch.SymInt` / `SymBool` / `SymFloat`.

torch calls these methods by name (the C++ `PythonSymNodeImpl` and the magic methods
installed on `torch.SymInt`), so that meta kernels compute output shapes as sympy
expressions over our symbols. `expr`, `_hint` and `shape_env` are read by torch's
Python shape helpers; `ShapeEnvAdapter` answers the ShapeEnv questions they ask.

Integer sizes are exact sympy expressions, rebuilt in the graph from `expr`. Every float
value (and every value computed from one that sympy cannot model exactly) also keeps its
`recipe`, the Python operation that made it, so the graph recomputes it operation by
operation as eager Python does, and its hint is that computation replayed on the example
sizes. `exact` says whether `expr` equals the eager value for every size: only then do
the ranges decide questions about it as they do for integers. An inexact value's `expr`
is the real-number value it approximates or `Opaque`; a comparison of such values is
decided from the ranges only where the real difference clears the rounding error of both
sides (shapes/float_error.py). Turning such a value into a Python constant, or a question
the ranges cannot settle that way, fixes the sizes it depends on, each with a guard.
"""
from __future__ import annotations

import builtins
import contextlib
import contextvars
import functools
import itertools
import math
import operator

import sympy
import torch

from ..errors import UnsupportedFeatureError
from ..source import SYMBOLIC_EXTREMA, asked_by_program
from .env import ShapeEnv
from .expr import FloorDiv, Mod
from .float_error import decide_float_relation
from .opaque import Opaque


# while a program is printed: symbol -> the user's Dim name, so printed sizes read `batch`
_DISPLAY_NAMES: contextvars.ContextVar[dict | None] = contextvars.ContextVar("graphport_display_names",
                                                                           default=None)


@contextlib.contextmanager
def display_names(names: dict):
    """Within: symbolic sizes print with the user's Dim names (`names`: symbol -> symbol)."""
    token = _DISPLAY_NAMES.set(names or None)
    try:
        yield
    finally:
        _DISPLAY_NAMES.reset(token)


_tags = itertools.count()


# Python semantics of each recipe operation: the hint replays them on example values.
def _sym_max(a, b):
    return builtins.float(builtins.max(a, b)) if isinstance(a, float) or isinstance(b, float) else builtins.max(a, b)


def _sym_min(a, b):
    return builtins.float(builtins.min(a, b)) if isinstance(a, float) or isinstance(b, float) else builtins.min(a, b)


_PYTHON = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "truediv": operator.truediv,
    "floordiv": operator.floordiv, "mod": operator.mod, "pow": operator.pow, "neg": operator.neg,
    "abs": builtins.abs, "sym_max": _sym_max, "sym_min": _sym_min, "sqrt": math.sqrt, "sym_float": float,
    "floor": math.floor, "ceil": math.ceil, "trunc": math.trunc,
    "eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le, "gt": operator.gt,
    "ge": operator.ge, "and": lambda a, b: a and b, "or": lambda a, b: a or b, "not": operator.not_,
    "is_integer": lambda a: float(a).is_integer(),
}

_SYMPY_ARITH = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul,
    "mod": lambda a, b: Mod(a, b), "sym_max": sympy.Max, "sym_min": sympy.Min,
}
_EXTREMA = frozenset({"sym_max", "sym_min"})
_REL = {"eq": sympy.Eq, "ne": sympy.Ne, "lt": sympy.Lt, "le": sympy.Le, "gt": sympy.Gt, "ge": sympy.Ge}
# Unevaluated: sympy's own evaluation is slow, and the env decides relations anyway.
_UNEVALUATED_REL = {op: functools.partial(fn, evaluate=False) for op, fn in _REL.items()}

_LIMIT = 2 ** 30   # a float expression with dyadic coefficients this small is computed exactly


def _representable(expr: sympy.Basic) -> bool:
    """Whether floats compute `expr` exactly at realistic sizes: dyadic coefficients, no roots."""
    if expr.has(Opaque) or any(not (a.is_Integer or a.is_Rational) for a in expr.atoms(sympy.Number)):
        return False
    for pw in expr.atoms(sympy.Pow):
        if not (pw.exp.is_Integer and pw.exp >= 0):
            return False
    for num in expr.atoms(sympy.Rational):
        q = int(num.q)
        if abs(int(num.p)) > _LIMIT or q > _LIMIT or q & (q - 1):
            return False
    return True


def _as_ratio(expr: sympy.Basic):
    """(P, d) with expr == P / d, P an integer-valued expression and d a positive integer, or None."""
    if expr.has(Opaque):
        return None
    num, den = sympy.fraction(sympy.together(expr))
    if not den.is_Integer or den == 0:
        return None
    if den < 0:
        num, den = -num, -den
    num = sympy.expand(num)
    if num.is_integer is not True:
        return None
    return num, int(den)


class SymNode:
    constant = None

    def __init__(self, expr: sympy.Basic, env: ShapeEnv, pytype: type, recipe: tuple | None = None,
                 exact: bool = True, constant=None):
        self._expr = expr
        self.env = env
        self.pytype = pytype
        self.shape_env = _adapter(env)
        self.recipe = recipe        # (operation, *arguments: SymNode or Python constant), or None
        self.exact = exact          # expr is the eager value at every size
        self._replayed = None
        if constant is not None:
            self.constant = constant

    # -- what torch reads -----------------------------------------------------------------

    @property
    def expr(self) -> sympy.Basic:
        env = self.env
        return env.simplify(self._expr) if env.replacements else self._expr

    @property
    def _hint(self):
        """The value at the example sizes (an optimization hint: answers from it record no guard)."""
        if self.recipe is None:
            return self.env.hint_of(self._expr)
        if self._replayed is None:
            op, *args = self.recipe
            values = [a.hint if isinstance(a, SymNode) else a for a in args]
            self._replayed = (values[0] if op == "const" else _PYTHON[op](*values),)
        return self._replayed[0]

    @_hint.setter
    def _hint(self, value):   # torch caches hints on nodes; ours are computed
        pass

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
        # sizes from example inputs have one; data-dependent values (u0 = x.item()) do not
        return not _data_dependent(self.env, self._expr)

    def is_symbolic(self) -> bool:
        return True

    def is_constant(self) -> bool:
        return False

    def maybe_as_int(self):
        expr = self.expr
        return int(expr) if expr.is_Integer and self.pytype is int else None

    def maybe_as_float(self):
        expr = self.expr
        return float(expr) if self.exact and self.pytype is float and expr.is_Number else None

    def maybe_as_bool(self):
        expr = self.expr
        return bool(expr) if expr in (sympy.true, sympy.false) else None

    def str(self) -> str:
        names = _DISPLAY_NAMES.get()
        return str(self.expr.xreplace(names) if names else self.expr)

    _graph_repr = str
    __str__ = str

    def __repr__(self) -> str:
        return f"SymNode({self.expr})"

    # -- constants ------------------------------------------------------------------------

    def _new(self, expr, pytype) -> "SymNode":
        return SymNode(expr, self.env, pytype)

    def _shared(self, key: tuple, make) -> "SymNode":
        """The env's one node for a pure value `key` names ((operation, *argument expressions):
        a computation of sympy algebra alone, whose result depends on nothing else), made by
        `make()` the first time. torch's kernels work the same sizes out many times per call
        (strides, element counts, bounds checks); a pure node holds no state of its own, so
        one node serves every time."""
        nodes = self.env.pure_nodes
        node = nodes.get(key)
        if node is None:
            node = nodes[key] = make()
        return node

    def _made(self, op: str, args: tuple, pytype: type, expr: sympy.Basic | None, exact: bool) -> "SymNode":
        """A value recomputed in the graph by its recipe; `expr` None: not modelled (Opaque)."""
        node = SymNode(sympy.Integer(0), self.env, pytype, (op, *args), exact and expr is not None)
        if expr is None:
            syms = set().union(*[a.expr.free_symbols for a in args if isinstance(a, SymNode)])
            expr = Opaque(sympy.Integer(next(_tags)), sympy.sympify(node.hint), *sorted(syms, key=str))
        node._expr = expr
        return node

    def wrap_int(self, num: int) -> "SymNode":
        return self._shared(("int", num), lambda: SymNode(sympy.Integer(num), self.env, int))

    def wrap_float(self, num: float) -> "SymNode":
        expr = sympy.Rational(num) if math.isfinite(num) else None
        return self._made("const", (num,), float, expr, True)

    def wrap_bool(self, num: bool) -> "SymNode":
        return self._shared(("bool", bool(num)), lambda: SymNode(sympy.true if num else sympy.false, self.env, bool))

    def clone(self) -> "SymNode":
        return self

    # -- arithmetic -----------------------------------------------------------------------

    def _pure(self, *others) -> bool:
        return self.recipe is None and all(o.recipe is None for o in others)

    def _pinned_by_branch_facts(self, other: "SymNode", op: str) -> "SymNode | None":
        """The program's own `min(a, b)` (or max) inside one side of a split branch, where that
        side's facts make it one value: a Python int (as a literal would be), or the argument
        it always is; None otherwise. Swin's `if min(h, w) <= window: window = min(h, w)` with
        sizes >= window makes the window the constant again on that side; carried as
        `Min(h, w)`, every size built from it would be a new unknown, and the views and the
        broadcast with the constant-size position table could not be decided. Only the
        program's calls: torch's own layout arithmetic (`max(size, 1)` in strides) keeps its
        forms, which the view rules read."""
        if not asked_by_program(SYMBOLIC_EXTREMA):
            return None
        expr = (sympy.Max if op == "sym_max" else sympy.Min)(self.expr, other.expr, evaluate=False)
        pinned = self.env.pinned_by_branch_facts(expr)
        if pinned is None:
            return None
        if pinned.is_Integer:
            return SymNode(pinned, self.env, int, constant=int(pinned))
        return self if pinned == self.expr else other

    def _binary(self, other: "SymNode", op: str) -> "SymNode":
        if self.recipe is None and other.recipe is None and self.pytype is int and other.pytype is int \
                and op not in _EXTREMA:
            # size arithmetic (the common case): one sympy operation, cached with its node
            a, b = self.expr, other.expr
            env = self.env
            return self._shared((op, a, b), lambda: SymNode(env.memo(_SYMPY_ARITH[op], a, b), env, int))
        pytype = float if float in (self.pytype, other.pytype) else int
        a, b = self.expr, other.expr
        exact = self.exact and other.exact
        if op in _EXTREMA and pytype is int and exact and self.env.branch_facts:
            pinned = self._pinned_by_branch_facts(other, op)
            if pinned is not None:
                return pinned
        if pytype is int and self._pure(other):
            if op in _EXTREMA:
                return self._new(self.env.extremum(op == "sym_max", a, b), int)
            return self._new(self.env.memo(_SYMPY_ARITH[op], a, b), int)
        expr = None if a.has(Opaque) or b.has(Opaque) else _SYMPY_ARITH[op](a, b)
        if op == "mod" and pytype is float:
            expr = None
        if expr is not None and pytype is float and not _representable(expr):
            exact = False
        return self._made(op, (self, other), pytype, expr, exact)

    def add(self, other):
        return self._binary(other, "add")

    def sub(self, other):
        return self._binary(other, "sub")

    def mul(self, other):
        return self._binary(other, "mul")

    def mod(self, other):
        return self._binary(other, "mod")

    def sym_max(self, other):
        return self._binary(other, "sym_max")

    def sym_min(self, other):
        return self._binary(other, "sym_min")

    def floordiv(self, other):
        if float not in (self.pytype, other.pytype):
            if self._pure(other):
                return self._new(FloorDiv(self.expr, other.expr), int)
            return self._made("floordiv", (self, other), int, None, False)
        # float // float is floor of the exact quotient, a float
        ratio = _as_ratio(self.expr / other.expr) if self.exact and other.exact else None
        expr = FloorDiv(*ratio) if ratio is not None and other.expr.is_Number and other.expr > 0 else None
        return self._made("floordiv", (self, other), float, expr, True)

    int_floordiv = floordiv

    def truediv(self, other):
        a, b = self.expr, other.expr
        expr = None if a.has(Opaque) or b.has(Opaque) else a / b
        exact = (self.exact and other.exact and expr is not None and b.is_Number and b != 0
                 and _representable(b) and _representable(1 / b) and _representable(expr))
        node = self._made("truediv", (self, other), float, expr, exact)
        # one correctly rounded division of integers: its floor, ceiling and truncation are exact
        node.ratio = (a, b) if (self.exact and other.exact and self.pytype is int and other.pytype is int
                                and expr is not None) else None
        return node

    int_truediv = float_truediv = truediv

    def pow(self, other):
        a, b = self.expr, other.expr
        if self.pytype is int and other.pytype is int and self._pure(other):
            return self._new(a ** b, int)
        expr = None if a.has(Opaque) or b.has(Opaque) else a ** b
        pytype = float if float in (self.pytype, other.pytype) else int
        exact = self.exact and other.exact and expr is not None and _representable(expr)
        return self._made("pow", (self, other), pytype, expr, exact)

    pow_by_natural = pow

    def float_pow(self, other):
        node = self.pow(other)
        if node.pytype is not float:
            node = node.sym_float()
        return node

    def sym_sum(self, others):
        others = list(others)
        if self._pure(*others):
            return self._new(sympy.Add(*[o.expr for o in others]), int)
        total = others[0]
        for o in others[1:]:
            total = total.add(o)
        return total

    def neg(self):
        if self.recipe is None:
            return self._new(-self.expr, self.pytype)
        expr = None if self.expr.has(Opaque) else -self.expr
        return self._made("neg", (self,), self.pytype, expr, self.exact)

    def pos(self):
        return self

    def abs(self):
        if self.recipe is None:
            return self._new(sympy.Abs(self.expr), self.pytype)
        expr = None if self.expr.has(Opaque) else sympy.Abs(self.expr)
        return self._made("abs", (self,), self.pytype, expr, self.exact)

    def _to_int(self, mode: str) -> "SymNode":
        """floor / ceil / trunc of a float: an exact integer expression where the float's
        value is known exactly (or is one division of integers), else computed in the graph."""
        if self.pytype is not float:
            return self
        ratio = getattr(self, "ratio", None)
        if ratio is not None and ratio[1].is_Integer and ratio[1] != 0:
            p, d = ratio
            found = (p, int(d)) if d > 0 else (-p, -int(d))
        else:
            found = _as_ratio(self.expr) if self.exact else None
        if found is not None:
            p, d = found
            if mode == "trunc":
                if self.env.static_value(sympy.Ge(p, 0)) is True:
                    mode = "floor"
                elif self.env.static_value(sympy.Le(p, 0)) is True:
                    mode = "ceil"
            if mode == "floor":
                return self._new(FloorDiv(p, d), int)
            if mode == "ceil":
                return self._new(FloorDiv(p + d - 1, d), int)
        return self._made(mode, (self,), int, None, False)

    def floor(self):
        return self._to_int("floor")

    def ceil(self):
        return self._to_int("ceil")

    def trunc(self):
        return self._to_int("trunc")

    sym_int = trunc

    def sym_float(self):
        if self.pytype is float:
            return self
        expr = self.expr
        return self._made("sym_float", (self,), float, expr, self.exact and not expr.has(Opaque))

    def sym_sqrt(self):
        a = self.expr
        expr = None if a.has(Opaque) else sympy.sqrt(a)
        return self._made("sqrt", (self,), float, expr, self.exact and expr is not None and _representable(expr))

    def _fixed(self, value, pytype) -> "SymNode":
        """A Python value the program computed from sizes: the sizes it depends on become constants."""
        self._pin()
        if pytype is float:
            node = self.wrap_float(value)
        else:   # a node of its own (wrap_int's and wrap_bool's are shared, and carry no constant)
            node = SymNode(sympy.Integer(value) if pytype is int else sympy.true if value else sympy.false,
                           self.env, pytype)
        node.constant = value
        return node

    def round(self, ndigits=None):
        # The graph has no round(); the value becomes a constant, guarded.
        value = builtins.round(self.hint, ndigits)
        return self._fixed(value, type(value))

    def sym_log2(self):
        return self._fixed(math.log2(self.hint), float)

    def is_integer(self):
        if self.pytype is int:
            return self.wrap_bool(True)
        found = _as_ratio(self.expr) if self.exact else None
        if found is not None:
            p, d = found
            return self._new(sympy.true if d == 1 else sympy.Eq(Mod(p, d), 0, evaluate=False), bool)
        return self._made("is_integer", (self,), bool, None, False)

    def _unsupported(self, what: str):
        raise UnsupportedFeatureError(
            f"the program applies {what} to a symbolic size ({self.expr}), which graphport cannot express yet",
            fix="compute sizes with +, -, *, // and %, or mark the dimension static")

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

    def _rel(self, other, op: str) -> "SymNode":
        fn = _REL[op]
        a, b = self.expr, other.expr
        if self._pure(other):
            if hash(a) == hash(b) and a == b:
                return self.wrap_bool(fn in (sympy.Eq, sympy.Le, sympy.Ge))
            if a.is_Number and b.is_Number:
                return self._new(fn(a, b), bool)
            env = self.env
            return self._shared((op, a, b), lambda: SymNode(env.memo(_UNEVALUATED_REL[op], a, b), env, bool))
        exact = self.exact and other.exact
        if a.has(Opaque) or b.has(Opaque):
            expr = None
        elif a.is_Number and b.is_Number:
            expr = fn(a, b)
        else:
            expr = fn(a, b, evaluate=False)
        return self._made(op, (self, other), bool, expr, exact)

    def eq(self, other):
        return self._rel(other, "eq")

    def ne(self, other):
        return self._rel(other, "ne")

    def lt(self, other):
        return self._rel(other, "lt")

    def le(self, other):
        return self._rel(other, "le")

    def gt(self, other):
        return self._rel(other, "gt")

    def ge(self, other):
        return self._rel(other, "ge")

    def sym_and(self, other):
        a, b = self.expr, other.expr
        if a is sympy.false or b is sympy.false:
            return self.wrap_bool(False)
        if a is sympy.true or b is sympy.true:
            return other if a is sympy.true else self
        if self._pure(other):
            env = self.env
            return self._shared(("and", a, b), lambda: SymNode(env.memo(sympy.And, a, b), env, bool))
        expr = None if a.has(Opaque) or b.has(Opaque) else sympy.And(a, b)
        return self._made("and", (self, other), bool, expr, self.exact and other.exact)

    def sym_or(self, other):
        a, b = self.expr, other.expr
        if a is sympy.true or b is sympy.true:
            return self.wrap_bool(True)
        if a is sympy.false or b is sympy.false:
            return other if a is sympy.false else self
        if self._pure(other):
            env = self.env
            return self._shared(("or", a, b), lambda: SymNode(env.memo(sympy.Or, a, b), env, bool))
        expr = None if a.has(Opaque) or b.has(Opaque) else sympy.Or(a, b)
        return self._made("or", (self, other), bool, expr, self.exact and other.exact)

    and_, or_ = sym_and, sym_or

    def sym_not(self):
        if self.recipe is None:
            return self._new(sympy.Not(self.expr), bool)
        expr = None if self.expr.has(Opaque) else sympy.Not(self.expr)
        return self._made("not", (self,), bool, expr, self.exact)

    def sym_ite(self, then, otherwise):
        # Deciding the condition (with a guard when the ranges do not settle it) is sound;
        # torch keeps a Piecewise instead, which our range reasoning cannot bound.
        return then if self.guard_bool() else otherwise

    # -- answers (these record guards) ----------------------------------------------------------

    def _pin(self) -> None:
        """Fix every size this value depends on to its example value, each with a guard."""
        for sym in self.env.table.in_order(self.expr.free_symbols):
            self.env.pin(sym)

    def _static(self, decides: bool = False):
        """The truth of this relation if the ranges settle it, without guarding; for a value
        the ranges model only approximately, only if the answer is not on a boundary.
        `decides`: the answer picks what the program computes (guard_or_false and kin), so an
        answer that holds only for sizes >= 1 or >= 2 is remembered as an assumption, which
        the small sizes in range are then proven against (or refused at call time)."""
        if self.recipe is None or self.exact:
            if decides:
                return self.env._decide(self.env.simplify(self.expr))
            return self.env.static_value(self.expr)
        return decide_float_relation(self, self.env)

    def guard_bool(self, file: str = "", line: int = 0) -> bool:
        if self.recipe is None or self.exact:
            return self.env.evaluate(self.expr, branch=True)
        found = decide_float_relation(self, self.env)
        if found is not None:
            return found
        self._pin()
        return builtins.bool(self.hint)

    bool_ = guard_bool

    def expect_true(self, file: str = "", line: int = 0) -> bool:
        """torch._check(cond): a fact about data-dependent values the ranges do not settle is
        assumed from here on and checked at run time by an assertion in the graph."""
        if not _data_dependent(self.env, self._expr) or not (self.recipe is None or self.exact):
            return self.guard_bool()
        found = self._static()
        if found is not None:
            return found
        self.env.assume(self.expr)
        asserter = self.env.unbacked.asserter
        if asserter is not None:
            asserter(self)
        return True

    def guard_or_false(self, file: str = "", line: int = 0) -> bool:
        """Kernels ask this for fast paths where False is always a valid answer: no guard."""
        found = self._static(decides=True)
        return False if found is None else found

    def guard_or_true(self, file: str = "", line: int = 0) -> bool:
        found = self._static(decides=True)
        return True if found is None else found

    def guard_size_oblivious(self, file: str = "", line: int = 0) -> bool:
        """Answered as if every size were at least 2, guarding only if that does not settle it."""
        found = self._static(decides=True)
        if found is None and _data_dependent(self.env, self._expr) and (self.recipe is None or self.exact):
            found = self.env.oblivious_value(self.expr)
        return self.guard_bool() if found is None else found

    def statically_known_true(self, file: str = "", line: int = 0) -> bool:
        return self._static() is True

    def guard_int(self, file: str = "", line: int = 0) -> int:
        """The program needs a Python int (int(), an index): a constant, guarded."""
        if self.recipe is None or self.exact:
            return int(self.env.specialize(self.expr))
        self._pin()
        return int(self.hint)

    int_ = guard_int

    def guard_float(self, file: str = "", line: int = 0) -> float:
        """The program needs a Python float (float(), math.sqrt()): a constant, guarded."""
        value = float(self.hint)
        self._pin()
        return value

    # -- layout questions (asked by TensorImpl for symbolic sizes) ---------------------------

    def _layout(self, sizes, strides, order) -> "SymNode":
        return _LayoutAnswer(self.env, lambda guarded: _strides_follow(self.env, sizes, strides, order, guarded))

    def is_contiguous(self, sizes, strides):
        return self._layout(sizes, strides, list(range(len(sizes) - 1, -1, -1)))

    def is_channels_last_contiguous_2d(self, sizes, strides):
        return self._layout(sizes, strides, [1, 3, 2, 0]) if len(sizes) == 4 else self.wrap_bool(False)

    def is_channels_last_contiguous_3d(self, sizes, strides):
        return self._layout(sizes, strides, [1, 4, 3, 2, 0]) if len(sizes) == 5 else self.wrap_bool(False)

    is_channels_last_strides_2d = is_channels_last_contiguous_2d
    is_channels_last_strides_3d = is_channels_last_contiguous_3d

    def is_non_overlapping_and_dense(self, sizes, strides):
        env = self.env

        def decide(guarded: bool):
            # Dense in stride order: the order itself is decided from the ranges, never read from hints.
            def less(a, b):
                rel = sympy.Lt(a, b)
                return env.evaluate(rel) if guarded else env.static_value(rel)

            def compare(i, j):
                a, b = strides[i].expr, strides[j].expr
                if a == b:
                    return 0
                first, second = less(a, b), less(b, a)
                if first is None or second is None:
                    raise _Undecided
                return -1 if first else 1 if second else 0

            try:
                order = sorted(range(len(sizes)), key=functools.cmp_to_key(compare))
            except _Undecided:
                return None
            return _strides_follow(env, sizes, strides, order, guarded)
        return _LayoutAnswer(env, decide)


class _Undecided(Exception):
    pass


class _LayoutAnswer(SymNode):
    """A layout question a tensor's metadata asks (contiguous? dense?). torch asks it both as
    a plain bool and as a `guard_or_false` fast path (internal-overlap checks, memory-format
    choices); it is worked out when asked, the fast path from the ranges alone, without a guard."""

    def __init__(self, env: ShapeEnv, decide):
        super().__init__(sympy.Dummy("layout"), env, bool)
        self._decide = decide   # decide(guarded) -> bool, or None when unguarded and undecided

    def guard_bool(self, file: str = "", line: int = 0) -> bool:
        return self._decide(True)

    bool_ = expect_true = guard_size_oblivious = guard_bool

    def guard_or_false(self, file: str = "", line: int = 0) -> bool:
        found = self._decide(False)
        return False if found is None else found

    def guard_or_true(self, file: str = "", line: int = 0) -> bool:
        found = self._decide(False)
        return True if found is None else found

    def statically_known_true(self, file: str = "", line: int = 0) -> bool:
        return self._decide(False) is True

    def maybe_as_bool(self):
        return None

    def _combine(self, other, fn) -> "SymNode":
        other_value = other.guard_bool() if isinstance(other, SymNode) else builtins.bool(other)
        return self.wrap_bool(fn(self.guard_bool(), other_value))

    def sym_and(self, other):
        return self._combine(other, lambda a, b: a and b)

    def sym_or(self, other):
        return self._combine(other, lambda a, b: a or b)

    and_, or_ = sym_and, sym_or

    def sym_not(self):
        return self.wrap_bool(not self.guard_bool())


def _approximate(expr: sympy.Basic) -> bool:
    """Whether a bare expression (no node to ask) may stand for a rounded float value: its
    rounding error is known only from the node's recipe (shapes/float_error.py), so such a
    question is left undecided."""
    return expr.has(Opaque) or any(not a.is_Integer for a in expr.atoms(sympy.Number))


def _strides_follow(env: ShapeEnv, sizes, strides, order, guarded: bool = True) -> bool | None:
    """Whether strides are dense in `order` (innermost dimension first): decided with guards,
    or (unguarded) from the ranges alone, None when they do not settle it."""
    ask = env.evaluate if guarded else env.static_value
    expected = sympy.Integer(1)
    for d in order:
        size = sizes[d].expr
        is_one = ask(sympy.Eq(size, 1))
        if is_one is None:
            return None
        if is_one:
            continue
        matches = ask(sympy.Eq(strides[d].expr, expected))
        if not matches:
            return matches
        expected = expected * size
    return True


def _data_dependent(env: ShapeEnv, expr) -> bool:
    """Whether `expr` involves a data-dependent symbol (none to look for in most captures)."""
    return bool(env.unbacked.infos) and bool(env.unbacked.involved(expr))


def _adapter(env: ShapeEnv) -> "ShapeEnvAdapter":
    """The env's one adapter (every node of an env answers torch's questions the same way)."""
    found = env.__dict__.get("_adapter")
    if found is None:
        found = env.__dict__["_adapter"] = ShapeEnvAdapter(env)
    return found


class ShapeEnvAdapter:
    """The ShapeEnv questions torch's Python shape helpers ask of `node.shape_env`.

    The hint questions answer with the example sizes and record no guard: torch's callers
    use them only for choices that are valid at every size (optimizations) or guard the
    choice themselves (`torch._check` after `guarding_hint_or_throw`)."""

    def __init__(self, env: ShapeEnv):
        self.env = env

    def _maybe_evaluate_static(self, expr, **kwargs):
        expr = self.env.simplify(expr)
        found = None if _approximate(expr) else self.env.static_value(expr)
        return None if found is None else sympy.true if found else sympy.false

    def evaluate_sym_node(self, node, size_oblivious=False, fallback_value=None):
        if fallback_value is not None:   # guard_or_false / guard_or_true: the default needs no guard
            found = node._static(decides=True)
            return fallback_value if found is None else found
        return node.guard_size_oblivious() if size_oblivious else node.guard_bool()

    def guarding_hint_or_throw(self, expr):
        return self.env.hint_of(expr)

    def optimization_hint(self, expr, fallback=None):
        if fallback is not None and _data_dependent(self.env, self.env.simplify(expr)):
            return fallback
        return self.env.hint_of(expr)

    def size_hint(self, expr, allow_none=False):
        if allow_none and _data_dependent(self.env, self.env.simplify(expr)):
            return None
        return self.env.hint_of(expr)


def size_expr(size) -> sympy.Expr:
    """A size, stride or offset as an expression: a symbolic one's own, a number as an Integer."""
    return size.node.expr if isinstance(size, torch.SymInt) else sympy.Integer(size)


def symint(expr: sympy.Expr, env: ShapeEnv) -> torch.SymInt | int:
    expr = env.simplify(expr)
    if expr.is_Integer:
        return int(expr)
    return torch.SymInt(SymNode(expr, env, int))




def value_at(node: SymNode, values: dict) -> sympy.Basic | int | float | bool | None:
    """The node's value once the given symbols take the given sizes: an expression in the
    other symbols, or a number; None when the value needs a symbol that is not given (a
    float operation of Python's on a size still symbolic)."""
    if node.recipe is None:
        return sympy.sympify(node.expr.xreplace(values))
    op, *args = node.recipe
    inputs = [value_at(a, values) if isinstance(a, SymNode) else a for a in args]
    if any(v is None or (isinstance(v, sympy.Basic) and v.free_symbols) for v in inputs):
        return None
    numbers = [(int(v) if v.is_Integer else float(v)) if isinstance(v, sympy.Basic) else v for v in inputs]
    return numbers[0] if op == "const" else _PYTHON[op](*numbers)
