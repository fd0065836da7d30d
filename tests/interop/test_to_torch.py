"""to_torch: a graphport program handed to torch.export's world must be the same program there.

torch's own constructor runs its verifier on the converted program; on top of that, every
test runs the converted program (module(), and after torch's own passes) against eager at
the example inputs and at other sizes inside the declared ranges.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import graphport as gp
from graphport.interop import to_torch

from .zoo_cases import NAMES, assert_matches, eager, exported, input_sets, slow


class Mixed(nn.Module):
    """Parameters, a buffer, a non-persistent buffer, a lifted constant, a size output."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.register_buffer("scale", torch.full((3,), 2.0))
        self.register_buffer("shift", torch.ones(3), persistent=False)

    def forward(self, x, y):
        z = self.lin(torch.cat([x, y])) * self.scale + self.shift + torch.tensor([0.5, 0.0, -0.5])
        return z, x.shape[0] * 2


def _mixed(dynamic: bool) -> gp.ExportedProgram:
    spec = ({0: gp.Dim("batch", min=1, max=64)}, {0: gp.Dim("rows", min=1)}) if dynamic else None
    return gp.export(Mixed(), (torch.randn(2, 4), torch.randn(3, 4)), dynamic_shapes=spec)


def test_the_converted_program_is_a_torch_export_program_with_the_same_parts():
    ep = _mixed(dynamic=True)
    tep = to_torch(ep)
    assert isinstance(tep, torch.export.ExportedProgram)
    assert [n.name for n in tep.graph.nodes] == [n.name for n in ep.graph.nodes]
    assert [(s.kind.name, s.arg.name, s.target) for s in tep.graph_signature.input_specs] == \
        [(s.kind.name, s.arg.name, s.target) for s in ep.graph_signature.input_specs]
    assert [(s.kind.name, s.arg.name) for s in tep.graph_signature.output_specs] == \
        [(s.kind.name, s.arg.name) for s in ep.graph_signature.output_specs]
    assert tep.state_dict.keys() == ep.state_dict.keys() and tep.constants.keys() == ep.constants.keys()
    assert {str(k): (int(v.lower), str(v.upper)) for k, v in tep.range_constraints.items()} == \
        {"s0": (1, "64"), "s1": (1, "int_oo")}
    assert [e.fqn for e in tep.module_call_graph] == [e.fqn for e in ep.module_call_graph]
    assert tep.module_call_graph[0].signature.in_spec == ep.call_spec.in_spec
    from torch._subclasses.fake_tensor import FakeTensor
    vals = [n.meta["val"] for n in tep.graph.nodes if n.op != "output"]
    assert all(isinstance(v, (FakeTensor, torch.SymInt)) for v in vals)
    assert str(tep.graph.find_nodes(op="placeholder", target="x")[0].meta["val"].shape) == "torch.Size([s0, 4])"


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_module_matches_eager_at_the_example_and_other_sizes(dynamic):
    ep = _mixed(dynamic)
    module = to_torch(ep).module()
    sizes = [(2, 3)] + ([(1, 1), (5, 7), (64, 1)] if dynamic else [])
    for a, b in sizes:
        x, y = torch.randn(a, 4), torch.randn(b, 4)
        assert_matches(_eager_mixed(ep, x, y), module(x, y))


def _eager_mixed(ep, x, y):
    model = Mixed()
    model.load_state_dict(ep.state_dict)
    with torch.no_grad():
        return model(x, y)


def test_torch_refuses_inputs_outside_the_ranges():
    module = to_torch(_mixed(dynamic=True)).module()
    with pytest.raises(AssertionError, match="64"):
        module(torch.randn(65, 4), torch.randn(3, 4))


def test_torch_passes_run_on_the_converted_program():
    ep = _mixed(dynamic=True)
    tep = to_torch(ep)
    core = tep.run_decompositions()
    assert not any(n.target is torch.ops.aten.linear.default for n in core.graph.nodes)
    unflat = torch.export.unflatten(tep)
    x, y = torch.randn(5, 4), torch.randn(7, 4)
    expected = _eager_mixed(ep, x, y)
    assert_matches(expected, core.module()(x, y))
    assert_matches(expected, unflat(x, y))


def test_sizes_below_what_the_capture_holds_for_are_refused_by_torch_too():
    def rows_of_pairs(x):
        return x.reshape(x.shape[0], -1, 2).sum(-1)   # at 0 rows eager cannot infer the -1

    ep = gp.export(rows_of_pairs, (torch.randn(3, 4),), dynamic_shapes=({0: gp.Dim("n", min=0, max=8)},))
    assert next(iter(ep.shape_contract.symbols.values())).valid_from == 1
    tep = to_torch(ep)
    assert int(next(iter(tep.range_constraints.values())).lower) == 1
    for n in (1, 2, 8):
        x = torch.randn(n, 4)
        assert_matches(rows_of_pairs(x), tep.module()(x))
    with pytest.raises(AssertionError, match="Guard failed"):
        tep.module()(torch.randn(0, 4))


def test_derived_dims_and_relations_become_guards_torch_checks_through_its_passes():
    dx = gp.Dim("dx", min=2, max=32)
    ep = gp.export(lambda x, y: torch.cat([x, y]), (torch.randn(5, 3), torch.randn(11, 3)),
                   dynamic_shapes=({0: dx}, {0: 2 * dx + 1}))
    tep = to_torch(ep)
    for module in (tep.module(), tep.run_decompositions().module()):
        assert module(torch.randn(4, 3), torch.randn(9, 3)).shape == (13, 3)
        with pytest.raises(AssertionError, match=r"y.size\(\)\[0\] == 1 \+ 2 \* x.size\(\)\[0\]"):
            module(torch.randn(4, 3), torch.randn(8, 3))

    ep = gp.export(lambda x: x.reshape(-1, 2).sum(-1), (torch.randn(6),), dynamic_shapes=({0: gp.Dim.AUTO},))
    assert ep.shape_contract.relations
    module = to_torch(ep).module()
    assert_matches(torch.arange(8.0).reshape(-1, 2).sum(-1), module(torch.arange(8.0)))
    with pytest.raises(AssertionError, match="% 2"):
        module(torch.randn(7))


def test_nested_and_keyword_inputs_are_checked_under_torchs_names_for_them():
    class Nested(nn.Module):
        def forward(self, d, *, mask):
            return d["a"][0] * mask

    n = gp.Dim("n")
    ep = gp.export(Nested(), ({"a": [torch.randn(3, 2)]},), {"mask": torch.randn(3, 2)},
                   dynamic_shapes={"d": {"a": [{0: n}]}, "mask": {0: n}})
    module = to_torch(ep).module()
    x, mask = torch.randn(5, 2), torch.randn(5, 2)
    assert_matches(x * mask, module({"a": [x]}, mask=mask))
    with pytest.raises(AssertionError, match=r"mask.size\(\)\[0\] == d\['a'\]\[0\].size\(\)\[0\]"):
        module({"a": [x]}, mask=torch.randn(4, 2))


def _zoo_params(default: tuple[str, ...]) -> list:
    return [pytest.param(name, kind, marks=[] if (name in default and kind == "static") else [slow],
                         id=f"{name}-{kind}") for name in NAMES for kind in ("static", "dynamic")]


@pytest.mark.parametrize("name,kind", _zoo_params(("mlp", "lstm")))
def test_zoo_converted_module_matches_graphports_and_eager(name, kind):
    built, ep = exported(name, kind)
    module, ours = to_torch(ep).module(), ep.module()
    for args, kwargs in input_sets(built, kind):
        with torch.no_grad():
            theirs = module(*args, **kwargs)
            assert_matches(eager(built, args, kwargs), theirs)
            assert_matches(ours(*args, **kwargs), theirs)
