"""Dynamic Python ints: an int argument marked Dim.DYNAMIC or Dim.AUTO is a symbolic integer
input (a SymInt placeholder) with a range, checked at call time. The same user code runs
against both exporters (torch.export only as the oracle); graphport's program is compared
with eager at several values, 0 and 1 included where the range allows."""
from __future__ import annotations


import pytest
import torch
import torch.export

import graphport as gp
from graphport.interop import to_torch


class Scale(torch.nn.Module):
    def forward(self, x, n):
        return x * n + n


class Head(torch.nn.Module):
    def forward(self, x, n):
        return x[:n] * n


class Grid(torch.nn.Module):
    def forward(self, x, *, rows):
        return x.reshape(rows, -1)


class Build(torch.nn.Module):
    """Sizes made from the int: new tensors, arithmetic on it, a size compared with it."""
    def forward(self, x, n):
        steps = torch.arange(n, dtype=x.dtype)
        pad = torch.zeros(n + 1, x.shape[1])
        return torch.cat([x, pad]).sum(0) + steps.sum() * (n // 2), x.shape[0] * n


def _bounds(ep) -> list[tuple[str, str]]:
    return sorted((str(v.lower), str(v.upper).replace("int_oo", "oo")) for v in ep.range_constraints.values())


def _placeholder(ep, name: str):
    return next(n for n in ep.graph.nodes if n.op == "placeholder" and n.name == name)


def test_dynamic_int_is_a_symint_input(ex):
    x = torch.randn(4, 3)
    ep = ex.export(Scale(), (x, 5), dynamic_shapes={"x": None, "n": ex.Dim.DYNAMIC})
    assert isinstance(_placeholder(ep, "n").meta["val"], torch.SymInt)
    spec = ep.graph_signature.input_specs[-1]
    assert type(spec.arg).__name__ == "SymIntArgument" and spec.arg.name == "n"
    assert _bounds(ep) == [("0", "oo")]
    for n in (5, 0, 1, 2, 17):
        torch.testing.assert_close(ep.module()(x, n), Scale()(x, n))


def test_auto_int_with_bounds_is_checked_at_call_time(ex):
    x = torch.randn(4, 3)
    ep = ex.export(Scale(), (x, 3), dynamic_shapes={"x": None, "n": ex.Dim.AUTO(min=2, max=6)})
    assert _bounds(ep) == [("2", "6")]
    for n in (2, 6):
        torch.testing.assert_close(ep.module()(x, n), Scale()(x, n))
    with pytest.raises(AssertionError):
        ep.module()(x, 7)


def test_guard_on_the_int_narrows_its_range(ex):
    x = torch.randn(8, 3)
    ep = ex.export(Head(), (x, 5), dynamic_shapes={"x": None, "n": ex.Dim.DYNAMIC})
    assert _bounds(ep) == [("0", "8")]
    for n in (5, 2, 8):
        torch.testing.assert_close(ep.module()(x, n), Head()(x, n))
    with pytest.raises(AssertionError):
        ep.module()(x, 9)


def test_keyword_int_and_relations_it_must_keep(ex):
    x = torch.randn(8, 3)
    ep = ex.export(Grid(), (x,), {"rows": 4}, dynamic_shapes={"x": None, "rows": ex.Dim.DYNAMIC})
    for rows in (4, 2):
        torch.testing.assert_close(ep.module()(x, rows=rows), Grid()(x, rows=rows))
    with pytest.raises(AssertionError):   # 8 * 3 is not a multiple of 5: eager fails there too
        ep.module()(x, rows=5)
    with pytest.raises(RuntimeError):
        Grid()(x, rows=5)
    with pytest.raises(AssertionError):   # the capture's reshape is not the identity: both guard rows != 8
        ep.module()(x, rows=8)


def test_named_dim_on_an_int_is_refused_as_in_torch(ex):
    with pytest.raises(ValueError, match="Dim.AUTO|Dim.DYNAMIC"):
        ex.export(Scale(), (torch.randn(4, 3), 5), dynamic_shapes={"x": None, "n": ex.Dim("n", max=9)})


def test_static_hint_keeps_the_int_a_constant(ex):
    ep = ex.export(Scale(), (torch.randn(4, 3), 5), dynamic_shapes={"x": None, "n": ex.Dim.STATIC})
    assert not any(isinstance(n.meta.get("val"), torch.SymInt) for n in ep.graph.nodes if n.op == "placeholder")


# -- graphport only: its program at more values, its own checks, and the artifact -------------------

def test_sizes_from_the_int_match_eager_across_the_range():
    x = torch.randn(3, 4)
    ep = gp.export(Build(), (x, 4), dynamic_shapes={"x": {0: gp.Dim.DYNAMIC}, "n": gp.Dim.DYNAMIC})
    for rows, n in [(3, 4), (5, 0), (2, 1), (7, 9)]:
        x2 = torch.randn(rows, 4)
        got, want = ep.module()(x2, n), Build()(x2, n)
        torch.testing.assert_close(got[0], want[0])
        assert got[1] == want[1]


def test_small_values_are_not_specialized():
    """torch.export's module refuses n = 0 and 1 here (its capture specialized the slice for
    sizes >= 2); graphport's capture made no such assumption about the int, so they run."""
    x = torch.randn(8, 3)
    ep = gp.export(Head(), (x, 5), dynamic_shapes={"x": None, "n": gp.Dim.DYNAMIC})
    for n in (0, 1):
        torch.testing.assert_close(ep.module()(x, n), Head()(x, n))


def test_example_zero_or_one_is_dynamic():
    x = torch.randn(4, 3)
    for example in (0, 1):
        ep = gp.export(Scale(), (x, example), dynamic_shapes={"x": None, "n": gp.Dim.DYNAMIC})
        torch.testing.assert_close(ep.module()(x, 7), Scale()(x, 7))


def test_value_of_another_type_or_outside_the_range_is_refused():
    x = torch.randn(4, 3)
    module = gp.export(Scale(), (x, 3), dynamic_shapes={"x": None, "n": gp.Dim.DYNAMIC(max=6)}).module()
    for bad in (3.0, True, torch.tensor(3)):
        with pytest.raises(gp.InputGuardError, match="dynamic int"):
            module(x, bad)
    with pytest.raises(gp.InputGuardError, match=r"outside the range .* dynamic int n"):
        module(x, 7)
    with pytest.raises(gp.InputGuardError, match="outside the range"):
        module(x, -1)


def test_example_outside_the_hint_bounds_is_refused():
    with pytest.raises(gp.ConstraintViolationError, match="outside the range"):
        gp.export(Scale(), (torch.randn(4, 3), 5), dynamic_shapes={"x": None, "n": gp.Dim.DYNAMIC(min=6)})


def test_named_dim_error_says_what_to_use():
    with pytest.raises(gp.InvalidDimError) as err:
        gp.export(Scale(), (torch.randn(4, 3), 5), dynamic_shapes={"x": None, "n": gp.Dim("n")})
    assert "n is an int" in str(err.value) and "Dim.DYNAMIC" in str(err.value)


@pytest.fixture
def program():
    x = torch.randn(8, 3)
    return gp.export(Head(), (x, 5), dynamic_shapes={"x": {0: gp.Dim.DYNAMIC}, "n": gp.Dim.DYNAMIC})


def test_save_and_load_keep_the_symint_input(program, tmp_path):
    gp.save(program, tmp_path / "p.gport")
    loaded = gp.load(tmp_path / "p.gport")
    assert isinstance(_placeholder(loaded, "n").meta["val"], torch.SymInt)
    assert _bounds(loaded) == _bounds(program)
    for rows, n in [(8, 5), (6, 0), (3, 3)]:
        x = torch.randn(rows, 3)
        torch.testing.assert_close(loaded.module()(x, n), Head()(x, n))
    with pytest.raises(AssertionError):
        loaded.module()(torch.randn(3, 3), 4)   # n <= x.shape[0]
    x = torch.randn(6, 3)
    torch.testing.assert_close(loaded.run_decompositions().module()(x, 2), Head()(x, 2))


def test_decompositions_unflatten_and_torch_interop(program):
    x = torch.randn(6, 3)
    torch.testing.assert_close(program.run_decompositions().module()(x, 4), Head()(x, 4))
    torch.testing.assert_close(gp.unflatten(program)(x, 4), Head()(x, 4))
    theirs = to_torch(program)
    torch.testing.assert_close(theirs.module()(x, 4), Head()(x, 4))
    with pytest.raises(AssertionError):
        theirs.module()(x, 7)


def test_soundness_check_draws_the_int():
    report = gp.check(Head(), gp.export(Head(), (torch.randn(8, 3), 5),
                                        dynamic_shapes={"x": {0: gp.Dim.DYNAMIC}, "n": gp.Dim.DYNAMIC}))
    assert report.passed, report.summary()
    assert report.samples > 3 and report.refusals >= 1
