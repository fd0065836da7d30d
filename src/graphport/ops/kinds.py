"""What kind of operator is this? The questions capture asks of every ATen overload.

Answers come from the operator's schema (alias annotations, mutability) and the
dispatcher's registrations, and are cached per overload: capture asks them for every
call, so they must cost a dict lookup.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from functools import lru_cache

import torch

from .. import _torch

aten = torch.ops.aten

# Composite ops whose result may alias or mutate their input depending on runtime values;
# they are always decomposed, as torch.export does, so the graph's purity is static.
_METADATA_QUERIES = frozenset({
    aten.is_contiguous.default, aten.is_contiguous.memory_format,
    aten.is_strides_like_format.default, aten.is_non_overlapping_and_dense.default,
    aten.size.default, aten.sym_size.default, aten.stride.default, aten.sym_stride.default,
    aten.storage_offset.default, aten.sym_storage_offset.default, aten.numel.default,
    aten.sym_numel.default, aten.dim.default, torch.ops.prim.device.default,
})


class Kind(enum.Enum):
    FUNCTIONAL = "functional"   # pure: outputs are fresh tensors
    VIEW = "view"               # outputs alias the first argument
    INPLACE = "inplace"         # mutates and returns its first argument (add_)
    OUT = "out"                 # writes into out= arguments
    MUTATING = "mutating"       # mutates some arguments, returns fresh values (_native_batch_norm_legit)


@dataclass(frozen=True)
class OpInfo:
    kind: Kind
    # For INPLACE / OUT / MUTATING: the pure overload computing the same values.
    functional: _torch.OpOverload | None = None
    # For OUT / MUTATING: names of the arguments written to, in schema order.
    mutated_args: tuple[str, ...] = ()
    # Composite (CompositeImplicitAutograd) op that export keeps as one node.
    preserved: bool = False
    # Composite op that capture expands into its parts.
    decompose: bool = False


def _is_preservable(op: _torch.OpOverload) -> bool:
    """Same rule as torch.export's default level: functional composite ops stay whole."""
    if torch.Tag.maybe_aliasing_or_mutating in op.tags or op is aten.native_batch_norm.default:
        return False
    if op in _METADATA_QUERIES:
        return False
    schema = op._schema
    if schema.is_mutable or any(a.alias_info is not None for a in schema.arguments):
        return False
    return _torch.has_kernel(op)


def _written_args(schema) -> tuple[str, ...]:
    return tuple(a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write)


def _find_overload(packet, wanted_args: list[str]) -> _torch.OpOverload | None:
    for name in packet.overloads():
        candidate = getattr(packet, name)
        args = [a.name for a in candidate._schema.arguments]
        if args == wanted_args and not _written_args(candidate._schema):
            return candidate
    return None


def _functional_variant(op: _torch.OpOverload, kind: Kind) -> _torch.OpOverload | None:
    namespace = getattr(torch.ops, op.namespace)
    schema = op._schema
    base_name = schema.name.split("::")[1]
    if kind is Kind.INPLACE:
        packet = getattr(namespace, base_name.rstrip("_"), None)
        if packet is None:
            return None
        functional = getattr(packet, op._overloadname, None)
        if functional is not None and not _written_args(functional._schema):
            return functional
        return _find_overload(packet, [a.name for a in schema.arguments])
    if kind is Kind.OUT:
        written = set(_written_args(schema))
        wanted = [a.name for a in schema.arguments if a.name not in written]
        packet = getattr(namespace, base_name, None)
        return _find_overload(packet, wanted) if packet is not None else None
    packet = getattr(namespace, base_name + "_functional", None)
    if packet is None:
        return None
    return getattr(packet, op._overloadname, None) or _find_overload(packet, [a.name for a in schema.arguments])


@lru_cache(maxsize=None)
def op_info(op: _torch.OpOverload) -> OpInfo:
    schema = op._schema
    cia = _torch.is_composite_implicit(op)
    if cia and _is_preservable(op):
        return OpInfo(Kind.FUNCTIONAL, preserved=True)
    written = _written_args(schema)
    if written:
        first = schema.arguments[0] if schema.arguments else None
        if schema.name.endswith("_") and first is not None and first.name in written and len(written) == 1 \
                and not first.kwarg_only:
            kind = Kind.INPLACE
        elif all(a.kwarg_only for a in schema.arguments if a.name in written):
            kind = Kind.OUT
        else:
            kind = Kind.MUTATING
        return OpInfo(kind, _functional_variant(op, kind), written, decompose=cia)
    returns_alias = any(r.alias_info is not None for r in schema.returns)
    kind = Kind.VIEW if returns_alias else Kind.FUNCTIONAL
    return OpInfo(kind, decompose=cia)


def is_impure(target) -> bool:
    """Calls that must stay in the graph even when their result is unused: mutation,
    assertions, printing, and random ops (dropping one shifts the generator for every
    later random op, so values would differ from eager under the same seed).
    The meaning of fx's `Node.is_impure`, decided from the operator's schema and tags."""
    if isinstance(target, _torch.OpOverload):
        return (target._schema.is_mutable or target in _SIDE_EFFECT_OPS
                or torch.Tag.nondeterministic_seeded in target.tags or _takes_custom_object(target))
    if isinstance(target, _torch.HigherOrderOperator):
        return target.name() in _EFFECTFUL_HIGHER_ORDER
    return False


# Method calls on custom objects, and their effect-ordered form (capture/custom_objects.py).
_EFFECTFUL_HIGHER_ORDER = frozenset({"call_torchbind", "with_effects"})


def _takes_custom_object(op) -> bool:
    """A custom operator taking a TorchBind object may change its state: torch registers it effectful."""
    return any(isinstance(a.type, torch.ClassType) for a in op._schema.arguments)


_SIDE_EFFECT_OPS = frozenset({aten._assert_scalar.default, aten._assert_async.msg, aten.sym_constrain_range.default,
                              aten.sym_constrain_range_for_size.default, aten._print.default})

# Ops whose *output shape* depends on tensor values.
DATA_DEPENDENT_SHAPE = {
    aten.nonzero.default: "torch.nonzero / boolean-mask indexing",
    aten.masked_select.default: "masked_select / boolean-mask indexing",
    aten._unique2.default: "torch.unique",
    aten.unique_dim.default: "torch.unique",
    aten.unique_consecutive.default: "torch.unique_consecutive",
    aten.repeat_interleave.Tensor: "repeat_interleave with a tensor of repeats",
    aten.bincount.default: "torch.bincount",
}
# Ops that read a tensor's value into Python.
DATA_READS = {
    aten.item.default: "reads a tensor's value into Python with .item()",
    aten._local_scalar_dense.default: "reads a tensor's value into Python (.item(), int(t), float(t) or an `if` on "
                                      "a tensor)",
    aten.is_nonzero.default: "uses a tensor as a Python bool (an `if`, `while`, `and`/`or` or bool(t) on a tensor)",
    aten.equal.default: "compares tensors with torch.equal, which returns a Python bool",
    aten.allclose.default: "compares tensors with torch.allclose, which returns a Python bool",
}

# In-place ops that change the tensor's own shape or strides (no functional form keeps the object).
METADATA_MUTATING = frozenset({"t_", "transpose_", "squeeze_", "unsqueeze_", "resize_", "resize_as_", "as_strided_",
                               "swapdims_", "swapaxes_", "set_"})


def writes_arguments(op) -> bool:
    """Whether the operator's schema says it writes to any argument (in-place, out=, mutating)."""
    return any(a.alias_info is not None and a.alias_info.is_write for a in op._schema.arguments)
