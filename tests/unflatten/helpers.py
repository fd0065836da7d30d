"""Checks shared by the unflatten tests: an unflattened program against eager, ep.module()
and torch.export's unflatten of the same program (module paths, state names, outputs)."""
from __future__ import annotations

import copy

import torch
import torch.utils._pytree as pytree

import graphport as gp


def assert_close(a, b) -> None:
    la, sa = pytree.tree_flatten(a)
    lb, sb = pytree.tree_flatten(b)
    assert sa == sb, f"structures differ: {sa} vs {sb}"
    for x, y in zip(la, lb):
        if isinstance(x, torch.Tensor):
            torch.testing.assert_close(x, y, atol=1e-5, rtol=1e-5)
        else:
            assert x == y


def paths(module: torch.nn.Module, copies: bool = True) -> set[str]:
    """Module paths, with or without the per-call copies (`a@1`)."""
    return {name for name, _ in module.named_modules(remove_duplicate=False) if copies or "@" not in name}


def state_names(module: torch.nn.Module, copies: bool = True) -> set[str]:
    return {name for name in module.state_dict() if copies or "@" not in name}


def original_path(path: str) -> str:
    """`a@1.lin` -> `a.lin`: the module a per-call copy stands for."""
    return ".".join(part.split("@")[0] for part in path.split("."))


def eager_types(model: torch.nn.Module) -> dict[str, str]:
    return {name: type(m).__name__ for name, m in model.named_modules(remove_duplicate=False) if name}


def check_unflatten(model: torch.nn.Module, args: tuple, kwargs: dict | None = None, *, fresh: list | None = None,
                    preserve: tuple[str, ...] = (), dynamic_shapes=None, with_torch: bool = True):
    """Unflatten graphport's export of `model`; compare with eager (outputs and state after each
    call), ep.module(), and torch.export's unflatten. Returns (ep, unflattened module)."""
    kwargs = kwargs or {}
    def export():   # each runner its own program: unflatten and ep.module() use the program's tensors
        return gp.export(copy.deepcopy(model), args, kwargs, dynamic_shapes=dynamic_shapes,
                         preserve_module_call_signature=preserve)
    ep = export()
    unflat = gp.unflatten(ep)
    eager, via_module = copy.deepcopy(model), export().module()
    types = eager_types(model)
    for name, m in unflat.named_modules(remove_duplicate=False):
        if name and getattr(m, "graph", None) is not None:   # a module that ran keeps its class name
            assert type(m).__name__ == types[original_path(name)], name
    assert paths(unflat, copies=False) == paths(model)
    assert state_names(unflat, copies=False) == set(model.state_dict())
    for call_args, call_kwargs in [(args, kwargs), *(fresh or [])]:
        expected = eager(*copy.deepcopy(call_args), **copy.deepcopy(call_kwargs))
        got = unflat(*copy.deepcopy(call_args), **copy.deepcopy(call_kwargs))
        assert_close(got, expected)
        assert_close(via_module(*copy.deepcopy(call_args), **copy.deepcopy(call_kwargs)), expected)
        for name, buf in eager.named_buffers():
            torch.testing.assert_close(unflat.get_buffer(name), buf)
    if with_torch:
        tep = torch.export.export(copy.deepcopy(model), args, kwargs, dynamic_shapes=_torch_dims(dynamic_shapes),
                                  preserve_module_call_signature=preserve)
        tunflat = torch.export.unflatten(tep)
        assert paths(unflat, copies=False) == paths(tunflat, copies=False)
        assert state_names(unflat, copies=False) == state_names(tunflat, copies=False)
        assert_close(gp.unflatten(export())(*copy.deepcopy(args), **copy.deepcopy(kwargs)),
                     tunflat(*copy.deepcopy(args), **copy.deepcopy(kwargs)))
    return ep, unflat


def _torch_dims(spec):
    """The same dynamic_shapes spec with torch.export Dims."""
    def convert(v):
        if isinstance(v, gp.Dim):
            return torch.export.Dim(v.__name__, min=v.min, max=v.max)
        return v
    return None if spec is None else pytree.tree_map(convert, spec, is_leaf=lambda v: isinstance(v, gp.Dim))
