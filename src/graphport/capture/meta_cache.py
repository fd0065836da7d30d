"""Cache of meta-kernel results keyed by the arguments' metadata.

An op's output metadata depends only on its inputs' metadata and its scalar arguments,
and models repeat the same computation layer after layer (a 32-layer LLaMA asks every
shape question 32 times). With symbolic sizes each question costs sympy work, so
answers are kept per (op, argument metadata) and a hit rebuilds fresh meta tensors.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

_UNCACHEABLE = object()


def _size_key(v) -> Any:
    if isinstance(v, torch.SymInt):
        return v.node.expr
    return v


def _describe(t: torch.Tensor) -> tuple:
    shape, stride, offset = t.shape, t.stride(), t.storage_offset()
    try:   # static sizes: ints, hashable as they are (a symbolic size is not hashable)
        hash((shape, stride, offset))
    except TypeError:
        return ("T", tuple(_size_key(s) for s in shape), tuple(_size_key(s) for s in stride),
                _size_key(offset), t.dtype, t.device.type)
    return ("T", shape, stride, offset, t.dtype, t.device.type)


# Arguments whose key is their type's name and their value; looked up by exact type first,
# the commonest case, before the isinstance checks (which also admit their subclasses).
_ATOMS = frozenset({bool, int, float, str, type(None), torch.dtype, torch.device, torch.layout, torch.memory_format})


def _key_of(value) -> Any:
    kind = type(value)
    if kind in _ATOMS:
        return (kind.__name__, value)
    if isinstance(value, torch.Tensor):
        return _describe(value)
    if isinstance(value, (list, tuple)):
        parts = tuple(_key_of(v) for v in value)
        return _UNCACHEABLE if _UNCACHEABLE in parts else (kind.__name__, parts)
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return ("S", value.node.expr)
    if value is None or isinstance(value, (bool, int, float, str, torch.dtype, torch.device, torch.layout,
                                           torch.memory_format)):
        return (kind.__name__, value)
    return _UNCACHEABLE


def _rebuild(template):
    if isinstance(template, torch.Tensor):
        return torch.empty_strided(template.shape, template.stride(), dtype=template.dtype, device=template.device)
    if isinstance(template, (list, tuple)):
        return type(template)(_rebuild(t) for t in template)
    return template


class MetaCache:
    def __init__(self):
        self.entries: dict = {}
        self.hits = 0
        self.deferred = None   # capture/local_proofs.py: an answer carries the assumptions it needed

    def run(self, func, args: tuple, kwargs: dict, compute: Callable[[], Any]) -> Any:
        key = _key_of((args, tuple(sorted(kwargs.items()))))
        if key is _UNCACHEABLE:
            return compute()
        key = (func, key)
        found = self.entries.get(key)
        if found is not None:
            self.hits += 1
            if found[1] and self.deferred is not None:
                self.deferred.replay(found[1])
            return _rebuild(found[0])
        out = compute()
        if not _new_symbols(out, key):   # a data-dependent size (nonzero's row count) is new at every call
            self.entries[key] = (out, self.deferred.current() if self.deferred is not None else {})
        return out


def _new_symbols(out, key) -> bool:
    """Whether the result's sizes use a symbol its arguments do not: a fresh data-dependent
    symbol, which a cached answer would wrongly share between two calls."""
    sizes = []
    for leaf in out if isinstance(out, (list, tuple)) else (out,):
        if isinstance(leaf, torch.Tensor):
            sizes += [*leaf.shape, *leaf.stride(), leaf.storage_offset()]
        elif isinstance(leaf, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            sizes.append(leaf)
    symbols = set()
    for s in sizes:
        symbols |= getattr(getattr(getattr(s, "node", None), "expr", None), "free_symbols", set())
    return bool(symbols) and not symbols <= _key_symbols(key)


def _key_symbols(key) -> set:
    if isinstance(key, tuple):
        return set().union(*(_key_symbols(k) for k in key))
    return set(getattr(key, "free_symbols", ()))
