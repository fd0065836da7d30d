"""Bounds of integer size operations, from the bounds of their operands.

The range reasoning (`expr._Reasoner`) bounds an expression piece by piece: each floor
division, modulo and power is bounded from the bounds of its operands by the functions
here. They take and return Python numbers (int, Fraction, +-math.inf) and are exact for
the operation itself: every value the operation can take on operands inside their bounds
lies inside the returned bounds; for floor division, powers and modulo by a constant they
are the tightest the operands' bounds allow (each end is attained). What an operand's bounds cannot say (that `s + (-s) % 256` is a multiple of 256) is
passed in by the caller.
"""
from __future__ import annotations

import math
from fractions import Fraction

_INF = math.inf


def _floor(value, k) -> int | float:
    """floor(value / k) for a finite or infinite `value` and a positive, possibly infinite `k`;
    nan (nothing known) stays nan."""
    if value != value:
        return value
    if value in (_INF, -_INF):
        return value if k != _INF else (-_INF if value < 0 else _INF)
    if k == _INF:
        return 0 if value >= 0 else -1   # a finite value over a divisor that grows without end
    return math.floor(Fraction(value) / Fraction(k))


def _ceil(value, k) -> int | float:
    return value if value in (_INF, -_INF) or value != value else -math.floor(Fraction(-value) / Fraction(k))


def floordiv_bounds(num: tuple, den: tuple, multiple_of: int | None = None) -> tuple | None:
    """Bounds of `a // b` for a in `num`, b in `den`, or None when b may be <= 0.

    For b > 0, a // b grows with a, and with b it falls where a >= 0 and rises where a < 0,
    so the corners of the two ranges bound it. `multiple_of = k` says a is always a multiple
    of the constant divisor k: its bounds then round inward to multiples of k (a padded
    size `s + (-s) % k` with s >= 1 is at least k, so its quotient is at least 1)."""
    (a_lo, a_hi), (b_lo, b_hi) = num, den
    if not b_lo > 0:
        return None
    if multiple_of is not None and multiple_of > 0:
        a_lo = _ceil(a_lo, multiple_of) * multiple_of if a_lo != -_INF else a_lo
        a_hi = _floor(a_hi, multiple_of) * multiple_of if a_hi != _INF else a_hi
        if a_lo > a_hi:   # no multiple in range: the operand's bounds were empty or loose; keep them
            a_lo, a_hi = num
    lowest = min(_floor(a_lo, b_lo), _floor(a_lo, b_hi))
    highest = max(_floor(a_hi, b_lo), _floor(a_hi, b_hi))
    return lowest, highest


def mod_bounds(num: tuple, den: tuple) -> tuple | None:
    """Bounds of `a % b` (Python's modulo) for a in `num`, b in `den`, or None when b may be <= 0.

    In [0, b - 1]; no more than a where a >= 0; and, by a constant k, exactly the
    remainders of a where a's range lies within one period of k."""
    (a_lo, a_hi), (b_lo, b_hi) = num, den
    if not b_lo > 0:
        return None
    hi = b_hi - 1 if b_hi != _INF else _INF
    if a_lo >= 0:
        if a_hi < b_lo:   # 0 <= a < b: the modulo is a itself
            return a_lo, a_hi
        hi = min(hi, a_hi)
    if b_lo == b_hi and isinstance(b_lo, int) and isinstance(a_lo, int) and isinstance(a_hi, int) \
            and a_lo // b_lo == a_hi // b_lo:
        return a_lo % b_lo, a_hi % b_lo
    return 0, hi


def pow_bounds(base: tuple, exponent: int) -> tuple | None:
    """Bounds of `a ** n` for a in `base` and a positive integer n, or None for other exponents.

    Odd powers grow with a; even ones fall to 0 where the range of a crosses 0."""
    if exponent < 1:
        return None
    lo, hi = base
    low, high = _power(lo, exponent), _power(hi, exponent)
    if exponent % 2 == 1 or lo >= 0:
        return low, high
    if hi <= 0:
        return high, low
    return 0, max(low, high)


def _power(value, exponent: int):
    if value in (_INF, -_INF):
        return _INF if value > 0 or exponent % 2 == 0 else -_INF
    return value ** exponent
