"""The tracer tensor: a stand-in for a real tensor during capture.

It reports the real tensor's device, shape, strides and dtype, and holds the same
metadata on the meta device (`gp_meta`) for kernels to compute with. It does not know
its graph value: which node a tracer stands for depends on the scope being recorded
(see scope.py), and is looked up there.

A tracer made by a view op remembers its base and the chain of view steps from it, so a
write through it can be scattered back to the base, and a stale view recomputed.
"""
from __future__ import annotations

import torch

from .. import _torch
from ..errors import DataDependentError, UnsupportedFeatureError
from ..ops.views import ViewStep

META = torch.device("meta")


class TracerTensor(torch.Tensor):
    gp_meta: torch.Tensor
    gp_base: "TracerTensor | None"          # root tensor this one is a view of
    gp_chain: tuple[ViewStep, ...]          # view steps from gp_base to this tensor
    gp_version: int                         # for a base: how many writes it has had
    gp_written: bool                        # for a view: a write went through it
    gp_label: str                           # a name for messages
    # slots, not an attribute dict: one tracked object less per value the capture makes
    # (the cyclic collector's work grows with the tracked objects alive during an export)
    __slots__ = ("gp_meta", "gp_base", "gp_chain", "gp_version", "gp_written", "gp_label")

    __torch_function__ = _torch.disabled_torch_function_impl

    @staticmethod
    def __new__(cls, meta: torch.Tensor, device: torch.device, label: str,
                base: "TracerTensor | None" = None, chain: tuple[ViewStep, ...] = ()):
        t = _torch.make_wrapper_subclass(
            cls, meta.size(), strides=meta.stride(), storage_offset=meta.storage_offset(),
            dtype=meta.dtype, layout=meta.layout, device=device, requires_grad=meta.requires_grad,
            storage_size=meta.untyped_storage().nbytes())   # given: torch would work it out again from symbolic sizes
        t.gp_meta = meta
        t.gp_base = base
        t.gp_chain = chain
        t.gp_version = 0
        t.gp_written = False
        t.gp_label = label
        return t

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise UnsupportedFeatureError(
            f"a tensor from a graphport capture was used after the capture ended (in {func})",
            fix="do not keep tensors from inside the exported forward (for example in a global or an attribute)")

    def __repr__(self) -> str:
        return f"TracerTensor({self.gp_label}: {describe(self)})"

    def __getitem__(self, index):
        """Python indexing with symbolic integers (`x[i.item()]`), which torch's indexing does
        not take: each becomes a `select` after the rest of the index is applied. An error
        here is torch's indexing rejecting the index (the program's, as in eager)."""
        forwards_to_torch = True   # noqa: F841 (read from tracebacks: passes/small_sizes.py)
        parts = index if isinstance(index, tuple) else (index,)
        if not any(isinstance(p, torch.SymInt) for p in parts) or \
                any(p is Ellipsis or isinstance(p, (torch.Tensor, list)) or p is True or p is False for p in parts):
            return super().__getitem__(index)
        kept, selects, position = [], [], 0
        for p in parts:
            if isinstance(p, torch.SymInt):
                kept.append(slice(None))
                selects.append((position, p))
            elif isinstance(p, int):
                kept.append(p)
                continue
            else:
                kept.append(p)
            position += 1
        out = super().__getitem__(tuple(kept))
        for dim, i in reversed(selects):
            out = out.select(dim, i)
        return out

    def tolist(self):
        """Each element read with .item(): a data-dependent value per element. The list's
        length must be known while capturing, so the shape must be static."""
        if not all(isinstance(d, int) for d in self.shape):
            raise DataDependentError(
                f"the program calls .tolist() on a tensor of symbolic shape {list(self.shape)}, so the list's "
                "length is not known while capturing", fix="keep that dimension static, or work on the tensor itself")
        if self.dim() == 0:
            return self.item()
        return [row.tolist() for row in self.unbind(0)]

    def numpy(self, *args, **kwargs):
        raise data_dependent("converts a tensor to NumPy with .numpy()")

    def __array__(self, *args, **kwargs):
        raise data_dependent("converts a tensor to a NumPy array")

    def __deepcopy__(self, memo):
        return self


def describe(t: torch.Tensor) -> str:
    return f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}"


def meta_like(real: torch.Tensor) -> torch.Tensor:
    """The real tensor's metadata on the meta device (no data is copied)."""
    if real.device.type == "meta":
        return real.detach()
    meta = torch.empty_strided(real.shape, real.stride(), dtype=real.dtype, device=META)
    if real.requires_grad:
        meta.requires_grad_(True)
    return meta


DATA_FIX = (
    "capture records one path through the program, so it cannot branch on a tensor's value.\n"
    "Compute both sides and choose with torch.where(pred, a, b), or branch with\n"
    "torch.cond(pred, true_fn, false_fn, (x,)), which graphport captures with both branches;\n"
    "if the value only guards an assumption, state it with torch._check(...) on shapes instead.")


def data_dependent(what: str) -> DataDependentError:
    return DataDependentError(f"the program {what}, which needs a tensor's runtime value (it is data-dependent)",
                              fix=DATA_FIX)
