"""Classes of failures a random-program fuzzer found, each pinned by its smallest program.

Each test exports the program and compares it with eager (same RNG seed for random ops)
at the example and at other sizes in range, or checks that what graphport refuses it
refuses with its own error class and a message that says something true.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch._higher_order_ops.scan import scan

import graphport as gp

from tests.soundness import same_as_eager_under_seed


def bernoulli_in_place(x):
    return x.clone().bernoulli_(0.5)


def dropout_1d(x):
    return F.dropout1d(x, 0.5, training=True)


def dropout_2d(x):
    return F.dropout2d(x.unsqueeze(0), 0.5, training=True)


@pytest.mark.parametrize("fn", [bernoulli_in_place, dropout_1d, dropout_2d])
@pytest.mark.parametrize("dynamic", [False, True])
def test_random_ops_with_default_probability(fn, dynamic):
    """An in-place op whose argument equals its schema's default reaches capture without it;
    the functional counterpart requires it (bernoulli.p): it was refused with "missing value
    for argument 'p'" even with static shapes."""
    x = torch.randn(4, 3)
    spec = ({0: gp.Dim("n", min=2, max=16)},) if dynamic else None
    ep = gp.export(fn, (x,), dynamic_shapes=spec)
    same_as_eager_under_seed(fn, ep, x)
    if dynamic:
        same_as_eager_under_seed(fn, ep, torch.randn(9, 3))


def divmod_of_size(x):
    q, r = divmod(x.shape[0], 3)
    return x * q + r


def test_divmod_of_a_size():
    """divmod(size, k) was a raw TypeError (symbolic sizes have no __divmod__)."""
    ep = gp.export(divmod_of_size, (torch.randn(4, 3),), dynamic_shapes=({0: gp.Dim("n", min=0, max=16)},))
    for n in range(17):
        same_as_eager_under_seed(divmod_of_size, ep, torch.randn(n, 3))


def dropout_when_large(x):
    return F.dropout(x, 0.5, training=x.shape[0] > 2)


def test_dropout_training_flag_from_sizes_decided_by_ranges():
    """A size predicate passed as `training`: decided by the ranges where they settle it."""
    ep = gp.export(dropout_when_large, (torch.randn(4, 3),), dynamic_shapes=({0: gp.Dim("n", min=3, max=16)},))
    for n in (3, 4, 16):
        same_as_eager_under_seed(dropout_when_large, ep, torch.randn(n, 3))


def test_dropout_training_flag_from_sizes_fixes_the_size_otherwise():
    """Where they do not, the size is fixed with a guard: graphport's constraint violation,
    not torch's argument parser's TypeError."""
    with pytest.raises(gp.ConstraintViolationError, match="n"):
        gp.export(dropout_when_large, (torch.randn(4, 3),), dynamic_shapes=({0: gp.Dim("n", min=0, max=16)},))


class TrainingBatchNorm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = torch.nn.BatchNorm1d(3)

    def forward(self, x):
        return self.bn(x)


def test_small_size_refusal_names_the_size_that_fails():
    """Batch norm in training mode raises at batch 1 but runs at batch 0: a call at 0 may be
    refused (the program was proven from 2 up), but the refusal must not say the program
    fails at 0."""
    model = TrainingBatchNorm().train()
    ep = gp.export(model, (torch.randn(4, 3),), dynamic_shapes=({0: gp.Dim("n", min=0, max=16)},))
    TrainingBatchNorm().train()(torch.randn(0, 3))   # eager runs at 0
    with pytest.raises(gp.InputMismatchError) as info:
        ep.module()(torch.randn(0, 3))
    message = str(info.value)
    assert "at n = 1" in message, message


def cond_branch_with_size_float(x):
    return torch.cond(x.shape[0] > 2, lambda t: t * ((t.shape[0] + 1) ** -0.5), lambda t: t + 1, (x,))


def test_cond_branch_computing_with_a_size_derived_float():
    """The float was computed outside and passed to cond as an operand, which torch's cond
    rejects on every call; it is computed inside the branch from the size."""
    ep = gp.export(cond_branch_with_size_float, (torch.randn(4, 3),),
                   dynamic_shapes=({0: gp.Dim("n", min=0, max=16)},))
    for n in (0, 1, 2, 3, 4, 9, 16):
        same_as_eager_under_seed(cond_branch_with_size_float, ep, torch.randn(n, 3))
    cond = next(node for node in ep.graph.nodes if node.target is torch.ops.higher_order.cond)
    operands = cond.args[3]
    assert all(not isinstance(o.meta["val"], torch.SymFloat) for o in operands), operands


def test_training_batch_norm_of_an_empty_batch():
    """Eager returns a copy of an empty input and leaves the running statistics alone; the
    batch norm operator the capture recorded rejected the empty input on every call."""
    x = torch.randn(0, 3)
    reference, model = TrainingBatchNorm().train(), TrainingBatchNorm().train()
    ep = gp.export(model, (x,))
    module = ep.module()
    torch.testing.assert_close(module(x.clone()), reference(x.clone()))
    theirs = dict(reference.named_buffers())
    for name, buffer in module.named_buffers():
        torch.testing.assert_close(buffer, theirs[name], msg=name)


def write_through_strided_window(x):
    x.view(-1).as_strided((2,), (1,), 0).mul_(2)
    return x


def test_write_through_as_strided_window_past_an_empty_storage():
    """At x.shape[0] = 0 the window of two elements lies past the end of the input's storage:
    eager's as_strided raises, meta tensors do not check it, and the write-back's
    as_strided_scatter raised instead, an InternalError at export. Now the pinned trace fails
    as eager does, and the size 0 is refused at call with eager's reason."""
    ep = gp.export(write_through_strided_window, (torch.randn(4, 3),),
                   dynamic_shapes=({0: gp.Dim("n", min=0, max=16)},))
    for n in (1, 2, 4, 16):
        same_as_eager_under_seed(write_through_strided_window, ep, torch.randn(n, 3))
    with pytest.raises(RuntimeError, match="out of bounds for storage"):
        write_through_strided_window(torch.randn(0, 3))
    with pytest.raises(gp.InputMismatchError, match="out of bounds for storage"):
        ep.module()(torch.randn(0, 3))


def test_as_strided_past_the_storage_at_a_static_size_is_eagers_error():
    with pytest.raises(gp.OperatorError, match="out of bounds for storage of size 0"):
        gp.export(write_through_strided_window, (torch.randn(0, 3),))


def cond_on_a_data_dependent_size(x):
    positive = x[x > 0]
    return torch.cond(positive.shape[0] > 3, lambda t: t * torch.sym_float(t.shape[0]), lambda t: t + 1, (positive,))


def cond_with_a_size_float_on_a_data_dependent_operand(x):
    positive = x[x > 0]
    return torch.cond(x.shape[0] > 3, lambda t: t * ((t.shape[0] + 1) ** -0.5), lambda t: t + 1, (positive,))


@pytest.mark.parametrize("fn", [cond_on_a_data_dependent_size, cond_with_a_size_float_on_a_data_dependent_operand])
def test_branch_using_a_data_dependent_size_passed_as_an_operand(fn):
    """The size of a data-dependent operand reaches a branch as an operand of its own, a
    placeholder of the branch: the verifier took it for a use of u0 before any binding
    (InternalError "IR contract violated by node 'sym_float'")."""
    spec = ({0: gp.Dim("n", min=0, max=16)},)
    ep = gp.export(fn, (torch.randn(8),), dynamic_shapes=spec)
    for x in (torch.randn(8), torch.ones(8), -torch.ones(8), torch.randn(0), torch.randn(3), torch.randn(16)):
        same_as_eager_under_seed(fn, ep, x)


def scan_from_a_transposed_row(x):
    rows = x.transpose(1, 2)
    return scan(lambda c, row: (c + row, c * 2), torch.zeros_like(rows.select(0, 0)), rows, dim=0)[1]


def test_scan_refuses_the_size_one_carry_eager_rejects():
    """At x.shape[1] = 1 eager's zeros_like keeps the row's strides (1, 2) while the carry is
    laid out (1, 1), and torch's scan raises on the mismatch; the meta kernels lay the
    initial value out (1, 1) too, so the exported program answered there."""
    ep = gp.export(scan_from_a_transposed_row, (torch.randn(3, 2, 2),),
                   dynamic_shapes=({1: gp.Dim("n", min=0, max=16)},))
    for n in (2, 3, 16):
        same_as_eager_under_seed(scan_from_a_transposed_row, ep, torch.randn(3, n, 2))
    for n in (0, 1):
        with pytest.raises(Exception, match="same metadata"):
            scan_from_a_transposed_row(torch.randn(3, n, 2))
        with pytest.raises(gp.InputMismatchError, match="the program fails there: scan"):
            ep.module()(torch.randn(3, n, 2))
    with pytest.raises(gp.OperatorError, match="same metadata"):
        gp.export(scan_from_a_transposed_row, (torch.randn(3, 1, 2),))


def _scan_returning_its_carry(x):
    from torch._higher_order_ops.scan import scan
    return scan(lambda c, r: (c + r, c), torch.zeros_like(x[0]), x)[0]


def _scan_returning_its_slice(x):
    from torch._higher_order_ops.scan import scan
    return scan(lambda c, r: (c + r, r), torch.zeros_like(x[0]), x)[1]


def _map_returning_its_row(x):
    from functorch.experimental import control_flow
    return control_flow.map(lambda r: r, x)


def _while_returning_its_carry(x):
    from torch._higher_order_ops.while_loop import while_loop
    return while_loop(lambda i, y: i.sum() < 3, lambda i, y: (i + 1, y), (torch.zeros(1), x))[1]


@pytest.mark.parametrize("fn", [_scan_returning_its_carry, _scan_returning_its_slice, _map_returning_its_row,
                                _while_returning_its_carry], ids=lambda f: f.__name__.strip("_"))
def test_a_loop_body_returning_its_own_operand_is_refused_as_eager_refuses_it(fn):
    """A scan body returning its carry (or its slice, a map body its row, a while_loop body
    its carry) unchanged: torch's operators refuse outputs aliasing their inputs, in eager
    too; graphport answered."""
    x = torch.randn(4, 3)
    with pytest.raises(Exception, match="aliasing"):
        fn(x)
    with pytest.raises(gp.ControlFlowError, match="not a new tensor") as e:
        gp.export(fn, (x,))
    assert isinstance(e.value, RuntimeError)


def _divmod_and_min_of_a_data_dependent_size(x):
    m = x.nonzero()
    return x.new_ones(divmod(m.shape[0], 4)[1] + 1) * x.sum() + min(m.shape[0], 2) + max(m.shape[0], 1)


def test_divmod_min_max_of_a_data_dependent_size_in_a_static_export():
    """Sizes are symbolic in a static export too where they depend on data: divmod raised a
    raw TypeError there (min/max asked for the data-dependent comparison)."""
    x = torch.tensor([0.0, 1.0, -2.0, 3.0, 0.0, 5.0, 6.0])
    ep = gp.export(_divmod_and_min_of_a_data_dependent_size, (x,))
    for t in (x, torch.zeros(7), torch.ones(7), torch.arange(7.0)):
        torch.testing.assert_close(ep.module()(t), _divmod_and_min_of_a_data_dependent_size(t))
