"""from_torch: torch.export programs (made by torch.export, loaded from .pt2, or made by
to_torch) become graphport programs that pass graphport's verifier and run like eager."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from torch.export import Dim

import graphport as gp
from graphport.interop import from_torch, to_torch

from .test_to_torch import Mixed, _eager_mixed, _mixed
from .zoo_cases import NAMES, exported, slow


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_round_trip_prints_the_same_program(dynamic):
    ep = _mixed(dynamic)
    back = from_torch(to_torch(ep))
    assert str(back) == str(ep)
    assert back.shape_contract == ep.shape_contract
    assert back.call_spec == ep.call_spec and back.input_paths == ep.input_paths


def test_round_trip_keeps_derived_dims_relations_and_refusals():
    dx = gp.Dim("dx", min=2, max=32)
    programs = [
        gp.export(lambda x, y: torch.cat([x, y]), (torch.randn(5, 3), torch.randn(11, 3)),
                  dynamic_shapes=({0: dx}, {0: 2 * dx + 1})),
        gp.export(lambda x: x.reshape(-1, 2).sum(-1), (torch.randn(6),), dynamic_shapes=({0: gp.Dim.AUTO},)),
    ]
    for ep in programs:
        back = from_torch(to_torch(ep))
        assert str(back) == str(ep) and back.shape_contract == ep.shape_contract
    with pytest.raises(gp.InputGuardError):
        from_torch(to_torch(programs[1])).module()(torch.randn(7))


@pytest.mark.parametrize("name,kind", [pytest.param(n, k, marks=[] if (n == "mlp" and k == "static") else [slow],
                                                    id=f"{n}-{k}") for n in NAMES for k in ("static", "dynamic")])
def test_zoo_round_trip_prints_the_same_program(name, kind):
    """In the ATEN dialect, to_torch keeps graphport's operators, so the round trip is exact
    (the TRAINING dialect respells BatchNorm and flatten: test_training_ir.py)."""
    _, ep = exported(name, kind)
    assert str(from_torch(to_torch(ep, dialect="ATEN"))) == str(ep)


def _torch_mixed():
    model = Mixed()
    spec = ({0: Dim("batch", min=1, max=64)}, {0: Dim("rows", min=1)})
    return model, torch.export.export(model, (torch.randn(2, 4), torch.randn(3, 4)), dynamic_shapes=spec)


def _check_runs_like_eager(ep: gp.ExportedProgram, model: nn.Module) -> None:
    module = ep.module()
    for a, b in [(2, 3), (1, 1), (9, 5)]:
        x, y = torch.randn(a, 4), torch.randn(b, 4)
        with torch.no_grad():
            expected = model(x, y)
        out = module(x, y)
        torch.testing.assert_close(out[0], expected[0])
        assert out[1] == expected[1]
    with pytest.raises(gp.InputGuardError, match="outside the range"):
        module(torch.randn(65, 4), torch.randn(3, 4))


def test_a_torch_export_program_runs_in_graphport_like_eager():
    model, tep = _torch_mixed()
    ep = from_torch(tep)
    gp.verify(ep)
    assert {str(k): (int(v.lower), float(v.upper)) for k, v in ep.range_constraints.items()} == \
        {str(k): (int(v.lower), float(v.upper)) for k, v in tep.range_constraints.items()}
    _check_runs_like_eager(ep, model)


def test_a_program_loaded_from_pt2_runs_in_graphport_like_eager(tmp_path):
    model, tep = _torch_mixed()
    torch.export.save(tep, tmp_path / "mixed.pt2")
    _check_runs_like_eager(from_torch(torch.export.load(tmp_path / "mixed.pt2")), model)


def test_torch_guards_become_relations_graphport_checks():
    class Pairs(nn.Module):
        def forward(self, x):
            return x.reshape(-1, 2).sum(-1)

    tep = torch.export.export(Pairs(), (torch.randn(6),), dynamic_shapes=({0: Dim.AUTO},))
    module = from_torch(tep).module()
    torch.testing.assert_close(module(torch.arange(8.0)), torch.arange(8.0).reshape(-1, 2).sum(-1))
    with pytest.raises(gp.InputGuardError, match="Mod"):
        module(torch.randn(7))


def test_a_training_output_is_refused_with_its_kind_named():
    _, tep = _torch_mixed()
    tep.graph_signature.output_specs[0].kind = torch.export.graph_signature.OutputKind.LOSS_OUTPUT
    with pytest.raises(gp.UnsupportedFeatureError, match="LOSS_OUTPUT") as info:
        from_torch(tep)
    assert isinstance(info.value, RuntimeError) and info.value.fix


def test_a_graph_mutating_its_input_in_place_is_refused_with_the_node_named():
    class Doubles(nn.Module):
        def forward(self, x):
            return x * 2 + 1

    tep = torch.export.export(Doubles(), (torch.randn(3),))
    mul = next(n for n in tep.graph.nodes if n.target is torch.ops.aten.mul.Tensor)
    mul.target = torch.ops.aten.mul_.Tensor        # now writes into the user input x
    with pytest.raises(gp.UnsupportedFeatureError, match="mul.*mutates x in place"):
        from_torch(tep)


def test_a_size_function_with_no_counterpart_is_refused():
    import sympy
    from graphport.interop.symbols import SymbolMap
    from graphport.shapes.contract import size_symbol

    weird = sympy.Function("weird")(size_symbol("s0"))
    symbols = SymbolMap()
    with pytest.raises(gp.UnsupportedFeatureError, match="weird"):
        symbols.from_torch(weird)
    with pytest.raises(gp.UnsupportedFeatureError, match="not in the program's shape contract"):
        symbols.to_torch(size_symbol("s0") + 1)


def test_data_dependent_sizes_keep_their_symbols_and_bindings_both_ways():
    class NonZero(nn.Module):
        def forward(self, x):
            n = (x > 0).sum().item()
            torch._check(n >= 0)
            return torch.nonzero(x).float().sum(0), torch.zeros(n)

    x = torch.tensor([1.0, 0.0, 2.0, -1.0])
    ep = from_torch(torch.export.export(NonZero(), (x,)))
    computed = {f.symbol.name for f in ep.shape_contract.symbols.values() if not hasattr(f.source, "index")}
    assert computed == {"u0", "u1"}
    tep = to_torch(ep)
    bound = {str(s) for n in tep.graph.nodes for s in n.meta.get("unbacked_bindings", {})}
    assert bound == {"u0", "u1"}
    for value in (x, torch.tensor([3.0, 4.0, 0.0, 5.0])):
        expected, actual = NonZero()(value), tep.module()(value)
        torch.testing.assert_close(actual, expected)
    assert str(from_torch(tep)) == str(ep)
