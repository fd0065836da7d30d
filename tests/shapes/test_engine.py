"""The shape engine's own corner cases, each a bug it once had or a decision it makes."""
import operator

import pytest
import torch

import graphport as gp


def test_size_arithmetic_on_a_derived_dim_whose_root_never_appears_alone():
    """The only input dim is 20*s: the graph must compute s as size // 20, not use the size."""
    def f(x):
        return torch.arange(x.shape[0] // 20 - 1).float().sum() + x.sum()
    frames = gp.Dim("frames", min=2, max=50)
    ep = gp.export(f, (torch.randn(200),), dynamic_shapes=({0: 20 * frames},))
    for n in (40, 200, 1000):
        x = torch.randn(n)
        torch.testing.assert_close(ep.module()(x), f(x))
    with pytest.raises(gp.InputMismatchError, match="not of the form 20"):
        ep.module()(torch.randn(210))


def test_guard_or_false_questions_record_no_guard():
    """A kernel's fast-path question (is this size 1?) must not narrow the Dim (Dim.AUTO's
    range starts at 0, and the program is proven valid at 0 and 1)."""
    ep = gp.export(lambda x: x[1:-1] + 1, (torch.randn(6, 4),), dynamic_shapes=({0: gp.Dim.AUTO},))
    assert [(v.lower, str(v.upper)) for v in ep.range_constraints.values()] == [(0, "oo")]
    for n in (0, 1, 2):
        x = torch.randn(n, 4)
        assert torch.equal(ep.module()(x), x[1:-1] + 1)


def test_builtin_max_of_a_size_stays_symbolic():
    ep = gp.export(lambda x: x.new_zeros(max(x.shape[0], 3)) + 1, (torch.randn(5),),
                   dynamic_shapes=({0: gp.Dim("n", max=64)},))
    assert any(n.target is torch.sym_max for n in ep.graph.nodes)
    for n in (2, 3, 9):
        assert ep.module()(torch.randn(n)).shape == (max(n, 3),)


def test_size_returned_as_output_is_computed_from_the_input():
    ep = gp.export(lambda x: (x * 2, x.shape[0] * 3), (torch.randn(4),), dynamic_shapes=({0: gp.Dim("n")},))
    out, size = ep.module()(torch.randn(7))
    assert size == 21 and out.shape == (7,)
    assert any(n.target is operator.mul for n in ep.graph.nodes)


def test_capture_records_torch_cond_and_leaves_torch_as_it_was():
    def f(x):
        return torch.cond(x.sum() > 0, lambda t: t + 1, lambda t: t - 1, (x,))
    ep = gp.export(f, (torch.randn(3),))
    assert any(n.target is torch.ops.higher_order.cond for n in ep.graph.nodes)
    assert torch.cond is original_cond  # restored once capture ends


def test_torch_cond_on_a_size_predicate_keeps_the_dim_dynamic():
    def f(x):
        return torch.cond(x.shape[0] > 4, lambda t: t + 1, lambda t: t - 1, (x,))
    ep = gp.export(f, (torch.randn(8),), dynamic_shapes=({0: gp.Dim("n", max=64)},))
    assert any(n.target is torch.ops.higher_order.cond for n in ep.graph.nodes)
    torch.testing.assert_close(ep.module()(torch.ones(6)), torch.full((6,), 2.0))
    torch.testing.assert_close(ep.module()(torch.ones(3)), torch.zeros(3))


original_cond = torch.cond


def test_auto_dims_that_become_static_are_reported_with_the_reason():
    def f(x):
        return x.view(8, -1)  # pins dim 0 to 8
    with pytest.warns(UserWarning, match="became static = 8"):
        ep = gp.export(f, (torch.randn(8, 3),), dynamic_shapes=({0: gp.Dim.AUTO, 1: gp.Dim.AUTO},))
    assert any("test_engine.py" in note for note in ep.shape_report)
    with pytest.raises(gp.InputMismatchError, match="fixed that Dim.AUTO dimension to 8"):
        ep.module()(torch.randn(9, 3))
