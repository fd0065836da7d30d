"""Load-time check: every node's recorded value agrees with what its inputs compute.

Each call is run again on the meta values of its arguments (cheap: no data) and the
result's dtype and (symbolic) shape are compared with the node's recorded meta['val'].
A tampered or inconsistent graph is refused at load, with the node named, instead of
failing later inside a kernel.
"""
from __future__ import annotations

from typing import Any

import sympy
import torch
import torch.fx as fx

from .. import _torch
from ..capture.environment import capture_environment
from ..capture.meta_cache import MetaCache
from ..errors import ArtifactError
from ..passes.metadata import RuntimeValue

_META = torch.device("meta")


def check_graph(gm: fx.GraphModule, symbolic: bool) -> None:
    """`symbolic`: the program has size symbols (torch's Python meta kernels handle them)."""
    with capture_environment(None, symbolic=symbolic):
        _check(gm, MetaCache())


def _check(gm: fx.GraphModule, cache: MetaCache) -> None:
    """Layers repeat: a call is recomputed once per distinct argument metadata (`cache`)."""
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            _check(getattr(gm, node.target), cache)
        if node.op != "call_function" or isinstance(node.target, _torch.HigherOrderOperator):
            continue
        if "val" not in node.meta:
            raise ArtifactError(f"node '{node.name}' has no recorded value (meta['val'])")
        # recomputed on the meta device, where the recorded values' twins live
        args, kwargs = fx.node.map_aggregate((node.args, node.kwargs), _meta_value)
        try:
            got = cache.run(node.target, args, kwargs, lambda: node.target(*args, **kwargs))
        except Exception as e:   # the operator rejects its recorded arguments
            raise ArtifactError(f"node '{node.name}' ({node.target}) cannot be recomputed from its inputs: "
                                f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None
        problem = _difference(node.meta["val"], got)
        if problem:
            raise ArtifactError(f"node '{node.name}' ({node.target}) records {problem}: the graph was tampered "
                                "with or is inconsistent")


def _meta_value(value: Any) -> Any:
    if isinstance(value, fx.Node):
        if "val" not in value.meta:
            raise ArtifactError(f"node '{value.name}' has no recorded value (meta['val'])")
        return _torch.pytree.tree_map_only(RuntimeValue, lambda v: v.gp_meta, value.meta["val"])
    return _META if isinstance(value, torch.device) else value


def _difference(recorded: Any, computed: Any) -> str | None:
    if isinstance(recorded, torch.Tensor) or isinstance(computed, torch.Tensor):
        if not (isinstance(recorded, torch.Tensor) and isinstance(computed, torch.Tensor)):
            return f"a {type(recorded).__name__} where its inputs compute a {type(computed).__name__}"
        if recorded.dtype != computed.dtype:
            return f"dtype {recorded.dtype} where its inputs compute {computed.dtype}"
        if recorded.dim() != computed.dim() or any(not _same_size(a, b)
                                                   for a, b in zip(recorded.shape, computed.shape)):
            return f"shape {list(recorded.shape)} where its inputs compute {list(computed.shape)}"
        return None
    if isinstance(recorded, (list, tuple)) and isinstance(computed, (list, tuple)):
        if len(recorded) != len(computed):
            return f"{len(recorded)} results where its inputs compute {len(computed)}"
        for r, c in zip(recorded, computed):
            found = _difference(r, c)
            if found:
                return found
        return None
    if isinstance(recorded, (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool)) and \
            isinstance(computed, (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool)):
        return None if _same_size(recorded, computed) else f"the value {recorded} where its inputs compute {computed}"
    if recorded is None and computed is None:
        return None
    return f"a {type(recorded).__name__} where its inputs compute a {type(computed).__name__}"


def _same_size(a, b) -> bool:
    return _expr(a) == _expr(b)


def _expr(v):
    node = getattr(v, "node", None)
    if node is not None and hasattr(node, "expr"):
        expr = node.expr
        return int(expr) if isinstance(expr, sympy.Integer) else expr
    return v
