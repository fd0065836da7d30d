"""The dynamic-shapes API as torch.export has it: hints with bounds, ShapesCollection,
AdditionalInputs, specs written with torch.export's own objects, export's keyword
arguments. Shared behaviour runs against both exporters (torch.export only as the oracle)."""
from __future__ import annotations


import pytest
import torch
import torch.export

import graphport as gp


class Shifted(torch.nn.Module):
    def forward(self, x, y):
        return x + y[1:]


def xy(n: int = 4):
    return torch.randn(n, 3), torch.randn(n + 1, 3)


def bounds(ep) -> list[tuple[str, str]]:
    """Each range as (lower, upper), printed (torch's unbounded upper prints as `int_oo`)."""
    return sorted((str(v.lower), str(v.upper).replace("int_oo", "oo")) for v in ep.range_constraints.values())


def assert_runs_like_eager(ep, sizes):
    for n in sizes:
        args = xy(n)
        torch.testing.assert_close(ep.module()(*args), Shifted()(*args))


def test_hints_with_bounds(ex):
    spec = {"x": {0: ex.Dim.DYNAMIC(min=3, max=9)}, "y": {0: ex.Dim.AUTO(max=10)}}
    ep = ex.export(Shifted(), xy(), dynamic_shapes=spec)
    assert ("3", "9") in bounds(ep)
    assert_runs_like_eager(ep, [3, 9])
    with pytest.raises(AssertionError):
        ep.module()(*xy(12))


def test_hint_bounds_must_hold_for_the_example():
    with pytest.raises(RuntimeError, match="outside the range"):
        gp.export(Shifted(), xy(4), dynamic_shapes={"x": {0: gp.Dim.DYNAMIC(min=5)}, "y": {0: gp.Dim.AUTO}})


def test_hint_with_an_invalid_range_is_refused():
    with pytest.raises(gp.InvalidDimError):
        gp.Dim.DYNAMIC(min=5, max=2)


def test_static_hint_with_bounds_keeps_the_example_size(ex):
    ep = ex.export(Shifted(), xy(), dynamic_shapes={"x": {0: ex.Dim.STATIC(min=2)}, "y": None})
    assert not ep.range_constraints
    with pytest.raises(AssertionError):
        ep.module()(*xy(5))


def test_shapes_collection_spec_is_keyed_by_argument_name(ex):
    x, y = xy()
    d = ex.Dim("d", min=2, max=20)
    sc = ex.ShapesCollection()
    sc[x] = {0: d}
    sc[y] = {0: d + 1}
    spec = sc.dynamic_shapes(Shifted(), (x, y))
    assert set(spec) == {"x", "y"}
    ep = ex.export(Shifted(), (x, y), dynamic_shapes=spec)
    assert bounds(ep) == [("2", "20"), ("3", "21")]
    assert_runs_like_eager(ep, [2, 20])


def test_additional_inputs_make_differing_dims_dynamic(ex):
    ai = ex.AdditionalInputs()
    ai.add(xy(6))
    ai.add(xy(9))
    ep = ex.export(Shifted(), xy(4), dynamic_shapes=ai)
    assert len(ep.range_constraints) == 2
    assert_runs_like_eager(ep, [3, 6, 9, 30])
    with pytest.raises(AssertionError):      # the column size was the same in every set: static
        ep.module()(torch.randn(4, 5), torch.randn(5, 5))


def test_additional_inputs_the_program_refuses_are_an_export_error():
    class Halves(torch.nn.Module):
        def forward(self, x):
            return x.reshape(2, -1)
    ai = gp.AdditionalInputs()
    ai.add((torch.randn(7),))
    with pytest.raises(RuntimeError):
        gp.export(Halves(), (torch.randn(4),), dynamic_shapes=ai)


@pytest.mark.parametrize("build", ["tuple", "derived", "hints", "collection", "additional"])
def test_specs_written_with_torch_objects_are_accepted(build):
    """graphport reads torch.export's Dim, derived dims, hints and collections as its own."""
    te = torch.export
    x, y = xy()
    d = te.Dim("d", min=2, max=20)
    if build == "tuple":
        spec = ({0: d}, {0: d + 1})
    elif build == "derived":
        spec = {"x": {0: d}, "y": {0: d + 1}}
    elif build == "hints":
        spec = {"x": (te.Dim.AUTO(min=2, max=20), te.Dim.STATIC), "y": {0: te.Dim.DYNAMIC, 1: None}}
    elif build == "collection":
        spec = te.ShapesCollection()
        spec[x] = {0: d}
        spec[y] = {0: d + 1}
    else:
        spec = te.AdditionalInputs()
        spec.add(xy(7))
    ours = gp.export(Shifted(), (x, y), dynamic_shapes=spec)
    theirs = te.export(Shifted(), (x, y), dynamic_shapes=spec)
    if build == "additional":   # dims made dynamic as Dim.AUTO: graphport proves sizes 0 and 1 (torch starts at 2)
        assert bounds(theirs) == [("2", "oo"), ("3", "oo")]
        assert bounds(ours) == [("0", "oo"), ("1", "oo")]
        assert_runs_like_eager(ours, [0, 1])
    else:
        assert bounds(ours) == bounds(theirs)
    assert_runs_like_eager(ours, [2, 5, 20])


def test_derived_torch_dim_with_scale_and_offset():
    te = torch.export

    class Interleaved(torch.nn.Module):
        def forward(self, x, y):
            return x.repeat_interleave(2, 0) + y[1:]

    d = te.Dim("d", min=2, max=10)
    spec = {"x": {0: d}, "y": {0: 2 * d + 1}}
    x, y = torch.randn(3, 2), torch.randn(7, 2)
    ep = gp.export(Interleaved(), (x, y), dynamic_shapes=spec)
    assert bounds(ep) == bounds(te.export(Interleaved(), (x, y), dynamic_shapes=spec))
    x, y = torch.randn(5, 2), torch.randn(11, 2)
    torch.testing.assert_close(ep.module()(x, y), Interleaved()(x, y))


def test_export_keyword_arguments_of_torch_export(ex):
    x, y = xy()
    ep = ex.export(Shifted(), (), {"x": x, "y": y}, dynamic_shapes=None, strict=False,
                   preserve_module_call_signature=(), prefer_deferred_runtime_asserts_over_guards=False)
    torch.testing.assert_close(ep.module()(x=x, y=y), Shifted()(x, y))


def test_unimplemented_keyword_argument_is_named():
    with pytest.raises(gp.UnsupportedFeatureError, match="prefer_deferred_runtime_asserts_over_guards"):
        gp.export(Shifted(), xy(), prefer_deferred_runtime_asserts_over_guards=True)


class Outer(torch.nn.Module):
    def forward(self, x, y, z):
        return (x[:, None] * y[None, :]).flatten() + z


def test_relation_no_dim_can_state_is_checked_per_call(ex):
    """z's size must be x's times y's: no Dim states that, so both exporters keep it as a check."""
    spec = {"x": {0: ex.Dim("a")}, "y": {0: ex.Dim("b")}, "z": {0: ex.Dim("c")}}
    ep = ex.export(Outer(), (torch.randn(3), torch.randn(4), torch.randn(12)), dynamic_shapes=spec)
    args = (torch.randn(5), torch.randn(2), torch.randn(10))
    torch.testing.assert_close(ep.module()(*args), Outer()(*args))


def test_relation_no_dim_can_state_refuses_breaking_calls():
    spec = {"x": {0: gp.Dim("a")}, "y": {0: gp.Dim("b")}, "z": {0: gp.Dim("c")}}
    ep = gp.export(Outer(), (torch.randn(3), torch.randn(4), torch.randn(12)), dynamic_shapes=spec)
    with pytest.raises(gp.InputGuardError, match="relation"):
        ep.module()(torch.randn(5), torch.randn(2), torch.randn(11))
