"""Every control-flow error: a graphport ControlFlowError naming the line and a fix."""
from __future__ import annotations

import pytest
import torch
from functorch.experimental.control_flow import map as fmap

import graphport as gp
from graphport.errors import ControlFlowError


def _export(fn, *args):
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("buf", torch.zeros(3))

        def forward(self, *a):
            return fn(self, *a)
    return gp.export(M(), args)


def test_branches_returning_different_structures() -> None:
    with pytest.raises(ControlFlowError, match="different structures") as e:
        _export(lambda m, x: torch.cond(x.sum() > 0, lambda x: (x * 1, x + 1), lambda x: x * 2, (x,)), torch.randn(3))
    assert "test_errors.py" in str(e.value) and e.value.fix and isinstance(e.value, RuntimeError)


def test_branches_returning_different_dtypes() -> None:
    with pytest.raises(ControlFlowError, match="float32.*int64|dtype") as e:
        _export(lambda m, x: torch.cond(x.sum() > 0, lambda x: x + 1, lambda x: x.long(), (x,)), torch.randn(3))
    assert "to(dtype)" in e.value.fix


def test_branch_dependent_size_needs_contiguous_outputs() -> None:
    """An output whose size the branch decides gets contiguous strides; a branch returning
    it transposed is refused (a later view would read it wrongly), with the fix."""
    with pytest.raises(ControlFlowError, match="depends on the branch taken.*non-contiguous") as e:
        _export(lambda m, x: torch.cond(x.sum() > 0, lambda x: (x.t() + 1), lambda x: x[:, :2].t() * 1, (x,)),
                torch.randn(3, 4))
    assert ".contiguous()" in e.value.fix and "test_errors.py" in str(e.value)


def test_branch_writing_an_operand() -> None:
    with pytest.raises(ControlFlowError, match="writes in place") as e:
        _export(lambda m, x: torch.cond(x.sum() > 0, lambda x: x.add_(1) * 1, lambda x: x * 2, (x,)), torch.randn(3))
    assert "x + 1" in e.value.fix


def test_branch_writing_a_buffer() -> None:
    def fn(m, x):
        def true_fn(x):
            m.buf.add_(1)
            return x + m.buf
        return torch.cond(x.sum() > 0, true_fn, lambda x: x * 2, (x,))
    with pytest.raises(ControlFlowError, match="writes in place into b_buf"):
        _export(fn, torch.randn(3))


def test_branch_returning_an_input_says_to_clone() -> None:
    with pytest.raises(ControlFlowError, match="alias") as e:
        _export(lambda m, x: torch.cond(x.sum() > 0, lambda x: x, lambda x: x * 2, (x,)), torch.randn(3))
    assert ".clone()" in e.value.fix


def test_branch_returning_a_view_of_an_input() -> None:
    with pytest.raises(ControlFlowError, match="a view of an input"):
        _export(lambda m, x: torch.cond(x.sum() > 0, lambda x: x.view(3), lambda x: x * 2, (x,)), torch.randn(3))


def test_predicate_that_is_not_a_bool_tensor() -> None:
    with pytest.raises(ControlFlowError, match="bool tensor with one element"):
        _export(lambda m, x: torch.cond(x.sum(), lambda x: x + 1, lambda x: x * 2, (x,)), torch.randn(3))


def test_map_over_zero_length() -> None:
    with pytest.raises(RuntimeError, match="cannot be 0|zero-length"):
        _export(lambda m, xs: fmap(lambda x: x + 1, xs), torch.randn(0, 3))


def test_python_bool_predicate_folds_with_torchs_warning() -> None:
    with pytest.warns(UserWarning, match="Pred is a Python constant"):
        ep = _export(lambda m, x: torch.cond(True, lambda x: x + 1, lambda x: x * 2, (x,)), torch.randn(3))
    assert not [n for n in ep.graph.nodes if n.op == "get_attr"]
    x = torch.randn(3)
    assert torch.equal(ep.module()(x), x + 1)


def test_guard_inside_a_branch_becomes_a_program_guard_with_its_line() -> None:
    class M(torch.nn.Module):
        def forward(self, x):
            def true_fn(x):
                if x.shape[0] > 2:     # a question on the input's size, asked inside the branch
                    return x * 2
                return x + 1
            return torch.cond(x.sum() > 0, true_fn, lambda x: x - 1, (x,))
    with pytest.raises(gp.errors.ConstraintViolationError, match="n > 2") as e:
        gp.export(M(), (torch.randn(4),), dynamic_shapes={"x": {0: gp.Dim("n")}})
    assert "in true_fn" in str(e.value) and "min=3" in str(e.value)
    ep = gp.export(M(), (torch.randn(4),), dynamic_shapes={"x": {0: gp.Dim("n", min=3)}})
    x = torch.rand(5) + 0.1
    assert torch.equal(ep.module()(x), x * 2)
    assert torch.equal(ep.module()(-x), -x - 1)


def test_graphport_reexports_torchs_functions() -> None:
    from functorch.experimental.control_flow import map as torch_map
    from torch._higher_order_ops.scan import scan
    from torch._higher_order_ops.while_loop import while_loop
    assert gp.cond is torch.cond and gp.map is torch_map and gp.while_loop is while_loop and gp.scan is scan

    class M(torch.nn.Module):
        def forward(self, x):
            return gp.cond(x.sum() > 0, lambda x: x + 1, lambda x: x - 1, (x,)) + gp.map(lambda r: r * 2, x)
    ep = gp.export(M(), (torch.randn(3, 2),))
    x = torch.rand(3, 2)
    assert torch.equal(ep.module()(x), x + 1 + x * 2)


def test_while_loop_body_changing_a_carried_shape() -> None:
    with pytest.raises(ControlFlowError, match="changes carried value 1 from float32\\[3\\] to float32\\[6\\]") as e:
        _export(lambda m, i, x: gp.while_loop(lambda i, x: i < 3, lambda i, x: (i + 1, torch.cat([x, x])), (i, x)),
                torch.tensor(0), torch.randn(3))
    assert "test_errors.py" in str(e.value) and "shape and dtype" in e.value.fix


def test_while_loop_body_changing_a_carried_dtype() -> None:
    with pytest.raises(ControlFlowError, match="changes carried value 0 from int64\\[\\] to float32\\[\\]"):
        _export(lambda m, i, x: gp.while_loop(lambda i, x: i < 3, lambda i, x: (i + 0.5, x + 1), (i, x)),
                torch.tensor(0), torch.randn(3))


def test_while_loop_condition_that_is_not_a_bool() -> None:
    with pytest.raises(ControlFlowError, match="one bool tensor"):
        _export(lambda m, i, x: gp.while_loop(lambda i, x: i * 2, lambda i, x: (i + 1, x + 1), (i, x)),
                torch.tensor(0), torch.randn(3))


def test_while_loop_body_writing_a_buffer() -> None:
    def fn(m, i, x):
        def body(i, x):
            m.buf.add_(1)
            return i + 1, x + m.buf
        return gp.while_loop(lambda i, x: i < 3, body, (i, x))
    with pytest.raises(ControlFlowError, match="writes in place into b_buf"):
        _export(fn, torch.tensor(0), torch.randn(3))


def test_scan_changing_the_carry_shape() -> None:
    with pytest.raises(ControlFlowError, match="scan combine_fn .* changes carried value 0"):
        _export(lambda m, init, xs: gp.scan(lambda c, x: (c.sum(0), x * 2), init, xs), torch.zeros(3), torch.randn(4, 3))


def test_while_loop_closure_reads_the_initial_value_not_the_carried_one() -> None:
    """A body closing over a tensor that is also carried sees the tensor as it was outside."""
    def fn(m, i, x):
        return gp.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y + x), (i, x))
    ep = _export(fn, torch.tensor(0), torch.ones(3))
    i, y = ep.module()(torch.tensor(0), torch.ones(3))
    assert int(i) == 3 and torch.equal(y, torch.full((3,), 4.0))


def test_branch_returning_one_tensor_twice() -> None:
    with pytest.raises(ControlFlowError, match="share memory") as e:
        _export(lambda m, x: torch.cond(x.sum() > 0, lambda x: (x + 1,) * 2, lambda x: (x * 2, x * 3), (x,)),
                torch.randn(3))
    assert ".clone()" in e.value.fix


def test_branches_returning_different_layouts() -> None:
    with pytest.raises(ControlFlowError, match="different memory layouts") as e:
        _export(lambda m, x: torch.cond(x.sum() > 0, lambda x: x.t() * 2, lambda x: x.t().contiguous() * 3, (x,)),
                torch.randn(3, 4))
    assert ".contiguous()" in e.value.fix
