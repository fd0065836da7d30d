"""Decomposition tables: which operators `run_decompositions` expands, and how.

A table maps an operator overload to a Python function computing it from other operators.
The default table lowers to the Core ATen opset, as torch 2.13's does: every functional
composite (CompositeImplicitAutograd) ATen op maps to its own composite kernel, and the
non-composite ops torch lowers (`torch._decomp`'s Core ATen table) map to torch's
decompositions, used as op semantics. The user edits it like a dict: deleting an op keeps
it whole, a new entry decomposes an op with the user's function, and an empty dict means
"nothing decomposed".

Composite ops of other namespaces (a `torch.library` op with a CompositeImplicitAutograd
kernel) may be registered after the table is made, so the default table records which of
them the user deleted and adds the rest when it is used (`materialize`).
"""
from __future__ import annotations

import threading
from typing import Any, Callable

import torch

from .. import _torch
from .kinds import op_info
from .policy import DispatchPolicy

# Functional composite ATen ops torch's default table leaves whole (backends want them).
_PRESERVED_COMPOSITES = frozenset({
    torch.ops.aten.upsample_bilinear2d.vec, torch.ops.aten.upsample_nearest2d.vec,
    torch.ops.aten.silu_backward.default, torch.ops.aten.mish_backward.default,
    torch.ops.aten._fused_rms_norm.default,
})


class DecompositionTable(dict):
    """The mutable default table (`graphport.default_decompositions()`), with the semantics of
    torch.export's `CustomDecompTable`: ATen entries are filled in when the table is made;
    composites of other namespaces are added when the table is first read (`in`, `len`,
    iteration, `[op]`, `keys()`, `items()`, `values()`, `get`), so an op registered after
    `default_decompositions()` but before that read is in it, and again by `materialize()`,
    which `run_decompositions` calls. Writes do not materialize: `pop`/`del` of such an op
    before it was added keeps it whole (and gives its decomposition back), `[op] = fn` and
    `update` set entries. Unlike torch's, the ops the user deleted stay deleted after a
    materialization (torch forgets them there and adds them back at the next one)."""

    def __init__(self, entries: dict | None = None, deleted: set | None = None, materialized: bool = False):
        super().__init__(_aten_defaults() if entries is None else entries)
        self.deleted: set = set(deleted or ())   # non-ATen composites the user chose to keep whole
        self.has_materialized = materialized

    def _materialize_if_needed(self) -> None:
        if not self.has_materialized:
            self.materialize()

    def __getitem__(self, op):
        self._materialize_if_needed()
        return super().__getitem__(op)

    def __contains__(self, op) -> bool:
        self._materialize_if_needed()
        return super().__contains__(op)

    def __len__(self) -> int:
        self._materialize_if_needed()
        return super().__len__()

    def __iter__(self):
        self._materialize_if_needed()
        return super().__iter__()

    def __reversed__(self):
        self._materialize_if_needed()
        return super().__reversed__()

    def keys(self):
        self._materialize_if_needed()
        return super().keys()

    def values(self):
        self._materialize_if_needed()
        return super().values()

    def items(self):
        self._materialize_if_needed()
        return super().items()

    def get(self, op, default=None):
        self._materialize_if_needed()
        return super().get(op, default)

    def __delitem__(self, op) -> None:
        self.pop(op)

    def pop(self, op, *default):
        """Remove `op` (keep it whole) and return its decomposition. A composite of another
        namespace not added yet is recorded as deleted, and its own kernel returned; one
        deleted already is a KeyError (or `default`), as a missing key is."""
        if _is_aten(op):
            return super().pop(op, *default)
        if super().__contains__(op):
            self.deleted.add(op)
            return super().pop(op)
        if op in self.deleted or not op_info(op).preserved or not _torch.is_composite_implicit(op):
            if default:
                return default[0]
            raise KeyError(f"{op} is not in the decomposition table")
        self.deleted.add(op)
        return composite_decomposition(op)

    def __setitem__(self, op, fn: Callable) -> None:
        self.deleted.discard(op)
        super().__setitem__(op, fn)

    def update(self, other=(), **more) -> None:
        for op, fn in dict(other, **more).items():
            self[op] = fn

    def copy(self) -> "DecompositionTable":
        return DecompositionTable(dict(super().items()), self.deleted, self.has_materialized)

    def materialize(self) -> dict:
        """Add the composites of other namespaces registered by now (not the ones the user
        deleted); return the table as a plain dict."""
        for op in composite_ops(aten_only=False):
            if not _is_aten(op) and not super().__contains__(op) and op not in self.deleted:
                super().__setitem__(op, composite_decomposition(op))
        self.has_materialized = True
        return dict(super().items())


CustomDecompTable = DecompositionTable   # torch.export's name for it


def default_decompositions() -> DecompositionTable:
    """The Core ATen table, as a new mutable mapping the caller may edit."""
    return DecompositionTable()


class _AtenTable:
    """The default table's ATen entries, made again whenever torch's decomposition table (which
    `torch._decomp.register_decomposition` and the user may change at any time) differs from
    the one they were made from. One lock: threads lowering at once make it once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._source: dict | None = None       # torch's table as it was when `_made` was made
        self._made: tuple[dict, frozenset] = ({}, frozenset())

    def current(self) -> tuple[dict, frozenset]:
        """(op -> decomposition, the ops) as torch's table stands now; the dict is not to be changed."""
        theirs = _torch.decomposition_table()
        with self._lock:
            if self._source != theirs:   # same keys, same functions (a dict comparison: identity first)
                self._source = dict(theirs)
                entries = _make_aten_table()
                self._made = (entries, frozenset(entries))
            return self._made


_ATEN = _AtenTable()


def _make_aten_table() -> dict:
    entries = dict(_torch.core_aten_decompositions())
    # composites with a C++ kernel, and those whose kernel torch registers in Python
    python_composites = [op for op in _torch.decomposition_table() if isinstance(op, _torch.OpOverload)
                         and _is_aten(op) and _torch.is_composite_implicit(op) and op_info(op).preserved]
    for op in composite_ops(aten_only=True) + python_composites:
        if op not in _PRESERVED_COMPOSITES and op not in entries:
            entries[op] = composite_decomposition(op)
    return entries


def lowerable(op: _torch.OpOverload) -> bool:
    """Whether the default table, or the op's own composite kernel, can expand `op`."""
    return _torch.is_composite_implicit(op) or op in _aten_keys()


def _aten_keys() -> frozenset:
    return _ATEN.current()[1]


def _aten_defaults() -> dict:
    return dict(_ATEN.current()[0])


def _is_aten(op) -> bool:
    return op.namespace == "aten"


def composite_ops(aten_only: bool) -> list[_torch.OpOverload]:
    """Functional composite ops (ones a program may keep whole) registered so far."""
    found = []
    for name in _torch.composite_implicit_op_names():
        namespace, _, rest = name.partition("::")
        if aten_only and namespace != "aten":
            continue
        op = _resolve(namespace, rest)
        if op is not None and op_info(op).preserved:
            found.append(op)
    return found


def _resolve(namespace: str, rest: str) -> _torch.OpOverload | None:
    packet_name, _, overload = rest.partition(".")
    try:
        packet = getattr(getattr(torch.ops, namespace), packet_name)
        return getattr(packet, overload or "default")
    except (AttributeError, RuntimeError):
        return None


def composite_decomposition(op: _torch.OpOverload) -> Callable:
    """A composite op's own kernel as its decomposition (a Python one when registered)."""
    return op.decompose


class TablePolicy(DispatchPolicy):
    """Capture under a decomposition table: an op in the table is expanded with the table's
    function; a functional composite op not in it stays whole; other composites (views,
    aliasing ops) expand with their own kernel, as at the default level."""

    def __init__(self, table: dict):
        self.table = table

    def keep(self, op) -> bool:
        return op not in self.table and op_info(op).preserved

    def decomposition(self, op) -> Callable[..., Any] | None:
        found = self.table.get(op)
        return found if found is not None else super().decomposition(op)
