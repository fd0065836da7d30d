"""Opaque: a symbolic value sympy does not model (its own module so that the expression
codec can name it without importing the SymNode machinery)."""
from __future__ import annotations

import sympy


class Opaque(sympy.Function):
    """A value graphport does not model in sympy: Opaque(tag, example value, *symbols it
    depends on). Only its node's recipe computes it."""
    is_real = True

    @classmethod
    def eval(cls, *args):
        return None

    @property
    def gp_hint(self):
        value = self.args[1]
        return bool(value) if value in (sympy.true, sympy.false) else int(value) if value.is_Integer else float(value)

    def _sympystr(self, printer):
        return f"opaque{self.args[0]}({', '.join(printer._print(a) for a in self.args[2:])})"
