"""Kept composites' output metadata in a static capture, without recording their insides.

A composite operator capture keeps as one node (`linear`, attention, `conv2d`, ...) gets its
output metadata from its decomposition run on the tracers (`CaptureMode.metadata_by_decomposition`):
its C++ kernel chooses by what the tracers report (attention's fused CPU kernel and its
transposed layout by the device and `requires_grad`, `linear`'s out-of-place bias by the
tensors being a subclass), so the metadata is the one the real kernel gives. Under the
capture mode every sub-operator is recorded into a scope that is thrown away: an fx node, a
tracer bound in the scope, the mode's checks, per sub-operator, several times the cost of the
sub-operator's own meta kernel.

When every size is a number (no shape environment, so no assumption to record and no proof
to make), nothing of that record is read. `composite_metadata` runs the same decomposition on
the same tracers under `_FollowedDecomposition`, a mode that does for each sub-operator only
what the capture mode does to its metadata, in the capture mode's order:

- a functional operator: the capture mode's meta kernel through the capture's meta cache,
  so entries and answers are the ones the capture mode would make;
- a view: the view of the meta tensor;
- a composite the policy keeps: its own decomposition, followed the same way and cached under
  the capture mode's key for kept composites; a composite the policy expands: its decomposition;
- results: new tracers on the device the capture mode gives them.

Anything else the capture mode treats in its own way raises `Unfollowed`, and the caller runs
the plain path from the start: a write, a data read or data-dependent shape, a
special rule (`rules.SPECIAL`), a custom or effectful operator, a storage-addressed view
(`as_strided` of a view addresses its base), a composite that may alias its input or that
chooses its kernel by `requires_grad`, a plain tensor made inside the kernel (the capture mode
lifts it as a constant), any error (the plain path raises it as the user should see it). The
answer is the plain path's by construction where given;
tests/capture/test_static_composites.py compares the two on the zoo and on odd layouts.
"""
from __future__ import annotations

from typing import Any

import torch

from .. import _torch
from ..op_args import map_args
from ..ops.kinds import DATA_DEPENDENT_SHAPE, DATA_READS, Kind, op_info
from ..ops.views import STORAGE_ADDRESSED
from . import custom_ops
from .custom_objects import is_custom_object
from .data_dependent import rules as data_dependent_rules
from .effects import orders as effects_order
from .grad import CHOOSES_KERNEL_BY_GRAD
from .rules import SPECIAL
from .tracer import META, TracerTensor

aten = torch.ops.aten
pytree = _torch.pytree


class Unfollowed(Exception):
    """A sub-operator the capture mode treats in a way this mode does not follow."""


# Operators the capture mode handles before its generic path. `slice` and `select` have rules
# for data-dependent indices only, which decline (NotImplemented) where there is no shape
# environment, as in a static capture: they take the generic path there.
_NOT_FOLLOWED = frozenset(SPECIAL) | frozenset(DATA_READS) | frozenset(DATA_DEPENDENT_SHAPE) | frozenset(
    set(data_dependent_rules()) - {aten.slice.Tensor, aten.select.int}) | {
    aten.size.default, aten.stride.default, aten.is_nonzero.default}


def composite_metadata(func, args: tuple, kwargs: dict, capture) -> Any:
    """The metadata of kept composite `func` on these tracers, as the capture mode
    `capture`'s `metadata_by_decomposition` gives it in a static capture; raises Unfollowed
    where this mode does not follow the decomposition (the caller then runs the capture mode's).
    Read from `capture`: its meta cache and meta kernel (the same entries, the same answers),
    its dispatch policy, the device it gives a result, its cache key for a kept composite."""
    return _FollowedDecomposition(capture).decomposed_meta(func, args, kwargs)


class _FollowedDecomposition(_torch.TorchDispatchMode):
    def __init__(self, capture):
        super().__init__()
        self.cache = capture.rec.meta_cache
        self.meta_kernel = capture._meta_kernel
        self.policy = capture.policy
        self.device_of = capture._device
        self.kept_key = capture.kept_key

    def decomposed_meta(self, func, args, kwargs):
        """Run `func`'s decomposition on tracers; the results' meta tensors."""
        with self:
            out = func.decompose(*args, **kwargs)
        if out is NotImplemented:
            raise Unfollowed(func)
        if isinstance(out, tuple):
            out = tuple(out)   # a decomposition may return a named tuple; operators return plain ones
        return pytree.tree_map_only(TracerTensor, lambda t: t.gp_meta, out)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _NOT_FOLLOWED or not isinstance(func, _torch.OpOverload) or custom_ops.is_custom(func) \
                or effects_order(func):
            raise Unfollowed(func)
        if func is aten.index.Tensor and _masks(args):
            raise Unfollowed(func)
        if self.policy.keep(func):
            return self.kept(func, args, kwargs)
        decomposition = self.policy.decomposition(func)
        if decomposition is not None:
            with self:
                out = decomposition(*args, **kwargs)
            if out is not NotImplemented:
                return out
        kind = op_info(func).kind
        meta_args, meta_kwargs = map_args(_meta, (args, kwargs))
        if kind is Kind.FUNCTIONAL:
            val = self.cache.run(func, meta_args, meta_kwargs,
                                 lambda: self.meta_kernel(func, args, kwargs, meta_args, meta_kwargs))
        elif kind is Kind.VIEW and func not in STORAGE_ADDRESSED:
            val = func(*meta_args, **meta_kwargs)
        else:
            raise Unfollowed(func)
        return _wrap(val, self.device_of(args, kwargs))

    def kept(self, func, args, kwargs):
        """A kept composite met inside another: as the capture mode's `keep_whole`."""
        if self.policy.aliasing(func, args, kwargs) is not None or func in CHOOSES_KERNEL_BY_GRAD:
            raise Unfollowed(func)
        val = self.cache.run(self.kept_key(func), args, kwargs, lambda: self.decomposed_meta(func, args, kwargs))
        return _wrap(val, self.device_of(args, kwargs))



def _meta(a):
    if isinstance(a, TracerTensor):
        return a.gp_meta
    if isinstance(a, torch.Tensor) or is_custom_object(a):
        raise Unfollowed("a tensor or object made inside the kernel")   # the capture mode lifts it as a constant
    if isinstance(a, torch.device):
        return META
    return a


def _wrap(val, device: torch.device):
    """Tracers for a sub-operator's meta results, as the capture's recorder makes them (the
    graph value they would have is never asked for)."""
    if isinstance(val, torch.Tensor):
        return TracerTensor(val, device, "followed")
    if isinstance(val, (tuple, list)):
        return type(val)(TracerTensor(v, device, "followed") if isinstance(v, torch.Tensor) else v for v in val)
    return val


def _masks(args) -> bool:
    indices = args[1] if len(args) > 1 else ()
    return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices or ())


def static_capture(rec) -> bool:
    """Whether the capture is static: no shape environment (every size a number, nothing
    assumed or proven), and no other dispatch mode between this one and the kernels."""
    return rec.sizes is None and rec.deferred is None and _torch.dispatch_mode_count() == 0
