"""Size symbols as data: what kind each one is and in which order it was made.

A program's sizes are sympy symbols. Two kinds exist: an input size (backed: read from a
dimension of an input, or the value of a dynamic int input, with an example value) and a
data-dependent value (unbacked: computed by the graph, `.item()` or the row count of
`nonzero`, known only at run time). Reasoning needs both facts: which symbol replaces which
(the newer one), the order guards and fixes list symbols in, whether a value must be bound by
a node before use. They are kept here, per shape environment, and asked by function, never
read back from a symbol's name.

The names themselves (`s0, s1, ...` for input sizes, `u0, u1, ...` for data-dependent
values, torch.export's spelling) are made here too, and printed programs and artifacts keep
them; this module is the only one that knows how a name is spelled.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Iterable

import sympy


class SymbolKind(enum.Enum):
    INPUT = "input size"                  # backed: an input's dimension or a dynamic int input
    DATA_DEPENDENT = "data-dependent"     # unbacked: a value the graph computes


_PREFIX = {SymbolKind.INPUT: "s", SymbolKind.DATA_DEPENDENT: "u"}


@dataclass
class SymbolTable:
    """Kind and creation order of each symbol of one shape environment. A symbol is entered
    once; entering it again (a replay handing out its source's symbols) changes nothing."""
    _entries: dict[sympy.Symbol, SymbolKind] = field(default_factory=dict)
    _order: dict[sympy.Symbol, int] = field(default_factory=dict)
    _counts: dict[SymbolKind, int] = field(default_factory=lambda: dict.fromkeys(SymbolKind, 0))

    def next_name(self, kind: SymbolKind) -> str:
        """The name the next symbol of `kind` gets (`s3`, `u0`): its number counts the symbols
        of that kind entered so far."""
        return f"{_PREFIX[kind]}{self._counts[kind]}"

    def add(self, sym: sympy.Symbol, kind: SymbolKind) -> None:
        if sym in self._entries:
            return
        self._entries[sym] = kind
        self._order[sym] = len(self._order)
        self._counts[kind] += 1

    def kind(self, sym: sympy.Symbol) -> SymbolKind | None:
        """The symbol's kind; None for a symbol this environment never made."""
        return self._entries.get(sym)

    def is_input(self, sym: sympy.Symbol) -> bool:
        return self._entries.get(sym) is SymbolKind.INPUT

    def is_data_dependent(self, sym: sympy.Symbol) -> bool:
        return self._entries.get(sym) is SymbolKind.DATA_DEPENDENT

    def in_order(self, syms: Iterable[sympy.Symbol], reverse: bool = False) -> list[sympy.Symbol]:
        """`syms` in the order they were made (newest first with `reverse`)."""
        return sorted(syms, key=self._order.__getitem__, reverse=reverse)


def name_number(sym: sympy.Symbol) -> int:
    """The n of a symbol named `s<n>` or `u<n>`. torch's shape environment names its symbols
    the same way from a counter: setting that counter from n makes torch's symbol carry our
    name (interop). Not a fact to reason with: ask the table for kind and order."""
    digits = sym.name.lstrip("".join(_PREFIX.values()))
    return int(digits) if digits.isdigit() else 0
