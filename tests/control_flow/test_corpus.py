"""The control-flow corpus: every program matches eager on inputs that take each branch (and
several map lengths), and each subgraph holds the operators torch.export's holds."""
from __future__ import annotations

import collections
import warnings

import pytest
import torch
import torch.fx as fx

import graphport as gp

from .corpus import CASES, Case

_IGNORED = {"sym_size", "getitem"}
# torch.export keeps `reshape` undecomposed inside cond/map subgraphs while it decomposes it
# to `view` at the top level; graphport records the view in both places (the same values).
_SAME = {"aten::reshape": "aten::view"}


def _export(case: Case):
    torch.manual_seed(0)
    model = case.make().eval()
    dynamic = None
    if case.dynamic is not None:   # the corpus names torch's Dim; graphport takes its own
        dynamic = {k: None if v is None else {d: gp.Dim(dim.__name__, min=dim.min, max=None if dim.max > 2 ** 40 else dim.max)
                                            for d, dim in v.items()} for k, v in case.dynamic.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model, gp.export(model, case.args, dynamic_shapes=dynamic)


def _close(a, b) -> bool:
    flat_a, flat_b = torch.utils._pytree.tree_leaves(a), torch.utils._pytree.tree_leaves(b)
    return len(flat_a) == len(flat_b) and all(x.shape == y.shape and torch.allclose(x, y, atol=1e-5)
                                              for x, y in zip(flat_a, flat_b))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_matches_eager_on_every_branch(case: Case) -> None:
    model, ep = _export(case)
    run = ep.module()
    reference = case.make().eval()
    reference.load_state_dict(model.state_dict())
    for inputs in [case.args, *case.fresh]:
        ours = run(*[t.clone() for t in inputs])
        expected = reference(*[t.clone() for t in inputs])
        assert _close(ours, expected), f"{case.name} differs from eager on shapes {[list(t.shape) for t in inputs]}"


def _operators(module: fx.GraphModule, prefix: str = "") -> dict[str, collections.Counter]:
    """Subgraph attribute path -> multiset of the operators it calls (recursively)."""
    found = {}
    counts = collections.Counter()
    for node in module.graph.nodes:
        if node.op == "get_attr":
            found.update(_operators(getattr(module, node.target), f"{prefix}{node.target}."))
        if node.op == "call_function":
            name = node.target.name() if hasattr(node.target, "name") else getattr(node.target, "__name__", "")
            if hasattr(node.target, "_schema") and name.split("::")[-1].split(".")[0] not in _IGNORED:
                counts[_SAME.get(name, name)] += 1
    found[prefix or "<root>"] = counts
    return found


def _subgraph_operators(module: fx.GraphModule) -> dict[str, collections.Counter]:
    return {k: v for k, v in _operators(module).items() if k != "<root>"}


_TORCH_EXPORTS = [c for c in CASES if c.torch_exports]


def test_corpus_is_large_enough() -> None:
    assert len(_TORCH_EXPORTS) >= 20


@pytest.mark.parametrize("case", _TORCH_EXPORTS, ids=[c.name for c in _TORCH_EXPORTS])
def test_subgraph_operators_match_torch_export(case: Case) -> None:
    _, ep = _export(case)
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = torch.export.export(case.make().eval(), case.args, dynamic_shapes=case.dynamic)
    ours, theirs = _subgraph_operators(ep.graph_module), _subgraph_operators(reference.graph_module)
    assert ours, "the program has control flow: it must have subgraphs"
    assert ours == theirs


@pytest.mark.slow
@pytest.mark.parametrize("case", _TORCH_EXPORTS, ids=[c.name for c in _TORCH_EXPORTS])
def test_operands_and_layout_match_torch_export(case: Case) -> None:
    """The same control-flow nodes, subgraph attribute names, number of tensor operands, and
    the same parameters and buffers lifted into them (the order of lifted values is torch's
    tracer's own, not part of the layout)."""
    _, ep = _export(case)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = torch.export.export(case.make().eval(), case.args, dynamic_shapes=case.dynamic)

    def layout(module):
        out = []
        for node in module.graph.nodes:
            if node.op == "get_attr":
                out.append(("attr", node.target, layout(getattr(module, node.target))))
            elif node.op == "call_function" and isinstance(node.target, torch._ops.HigherOrderOperator):
                operands = torch.utils._pytree.tree_leaves([a for a in node.args if not (
                    isinstance(a, fx.Node) and a.op == "get_attr")][1 if node.target.name() == "cond" else 0:])
                # sizes a subgraph needs: torch recomputes them inside it, graphport passes them in
                names = [a.name for a in operands if isinstance(a, fx.Node)
                         and isinstance(a.meta.get("val"), torch.Tensor)]
                lifted = sorted(n for n in names if n.startswith(("p_", "b_", "c_")))
                out.append((node.target.name(), len(names), lifted))
        return out
    assert layout(ep.graph_module) == layout(reference.graph_module)
