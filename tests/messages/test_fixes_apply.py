"""Every fix text that is code works when applied: each test takes the fix from the error
graphport raises (not from a copy of it), applies it, exports, and compares with eager on
inputs that take each path. Rows of docs/errors.md whose fix is code."""
import re

import pytest
import torch

import graphport as gp
from tests.soundness.test_data_dependent_aliases import _rows as rows


def _fix(error) -> str:
    return error.value.fix


def _same(ep, fn, *inputs):
    for args in inputs:
        torch.testing.assert_close(ep.module()(*args), fn(*args))


def test_a_branch_on_a_tensor_suggests_torch_where_and_torch_cond_and_both_export():
    def branchy(x):
        return x * 2 if x.sum() > 0 else x - 1
    with pytest.raises(gp.DataDependentError) as info:
        gp.export(branchy, (torch.randn(3),))
    fix = _fix(info)
    assert "torch.where(pred, a, b)" in fix and "torch.cond(pred, true_fn, false_fn, (x,))" in fix
    assert "not captured" not in fix

    def with_where(x):
        return torch.where(x.sum() > 0, x * 2, x - 1)

    def with_cond(x):
        return torch.cond(x.sum() > 0, lambda x: x * 2, lambda x: x - 1, (x,))
    for fixed in (with_where, with_cond):
        ep = gp.export(fixed, (torch.randn(3),))
        _same(ep, branchy, (torch.ones(3),), (-torch.ones(3),))


def test_a_question_about_an_item_names_the_users_variable_in_the_check():
    def unchecked(x, n):
        k = n.item()
        return x[:2] if k > 2 else x
    with pytest.raises(gp.DataDependentError) as info:
        gp.export(unchecked, (torch.randn(4), torch.tensor(3)))
    check = re.search(r"`(torch\._check\(.*?\))`", _fix(info))[1]
    assert check == "torch._check(k > 2)"

    def checked(x, n):
        k = n.item()
        exec(check, {"torch": torch}, {"k": k})   # the suggested line, as written
        return x[:2] if k > 2 else x
    ep = gp.export(checked, (torch.randn(4), torch.tensor(3)))
    _same(ep, unchecked, (torch.randn(4), torch.tensor(5)))


def test_an_item_of_many_elements_suggests_reducing_first():
    def many(x, t):
        return x * t.item()
    with pytest.raises(gp.DataDependentError) as info:
        gp.export(many, (torch.randn(3), torch.randn(3)))
    assert "t.sum().item()" in _fix(info)

    def reduced(x, t):
        return x * t.sum().item()
    ep = gp.export(reduced, (torch.randn(3), torch.randn(3)))
    _same(ep, reduced, (torch.randn(3), torch.randn(3)))


@pytest.mark.parametrize("model, shape, spec, violations", [
    (lambda x: x.view(2, 4, 2), (2, 8), lambda: ({1: gp.Dim("b")},), 1),   # one requirement, listed once
    (lambda x: x.view(2, 4, 2), (16,), lambda: ({0: gp.Dim("n", max=32)},), 1),
    (lambda x: x.reshape(-1, 2) * 2, (6,), lambda: ({0: gp.Dim("n", max=64)},), 1),   # a multiple of 2
])
def test_suggested_fixes_for_dynamic_shapes_export_when_applied(model, shape, spec, violations):
    x = torch.randn(*shape)
    dynamic_shapes = spec()
    with pytest.raises(gp.ConstraintViolationError) as info:
        gp.export(model, (x,), dynamic_shapes=dynamic_shapes)
    assert f"({violations} violation)" in info.value.what
    refined = gp.refine_dynamic_shapes_from_suggested_fixes(info.value.msg, dynamic_shapes)
    ep = gp.export(model, (x,), dynamic_shapes=refined)
    _same(ep, model, (x,))


def test_related_dims_are_suggested_as_one_dim():
    def add(x, y):
        return x + y
    spec = {"x": {0: gp.Dim("a")}, "y": {0: gp.Dim("b")}}
    with pytest.raises(gp.ConstraintViolationError) as info:
        gp.export(add, (torch.randn(4), torch.randn(4)), dynamic_shapes=spec)
    ep = gp.export(add, (torch.randn(4), torch.randn(4)),
                   dynamic_shapes=gp.refine_dynamic_shapes_from_suggested_fixes(info.value.msg, spec))
    _same(ep, add, (torch.randn(7), torch.randn(7)))


def test_a_static_dimension_refused_at_call_time_suggests_the_dim_that_works():
    def double(x):
        return x * 2
    ep = gp.export(double, (torch.randn(4, 3),))
    with pytest.raises(gp.InputGuardError) as info:
        ep.module()(torch.randn(5, 3))
    assert "export with dynamic_shapes marking dimension 0 of x as a graphport.Dim" in _fix(info)
    ep = gp.export(double, (torch.randn(4, 3),), dynamic_shapes=({0: gp.Dim("rows")},))
    _same(ep, double, (torch.randn(5, 3),))


def test_draft_export_names_the_users_condition_and_its_cond_fix_exports():
    class Branchy(torch.nn.Module):
        def forward(self, x):
            s = x.sum()
            if s > 0:
                return x * 2
            return x - 1
    report = gp.draft_export(Branchy(), (torch.ones(3),))._report
    issue, = report.failures
    assert "the program branches on `s > 0`" in issue.what and "u0" not in issue.what and "_to_copy" not in str(issue)
    assert issue.fix.startswith("to keep both paths, branch with torch.cond(s > 0, true_fn, false_fn, operands)")

    class WithCond(torch.nn.Module):
        def forward(self, x):
            s = x.sum()
            return torch.cond(s > 0, lambda x: x * 2, lambda x: x - 1, (x,))
    ep = gp.export(WithCond(), (torch.ones(3),))
    _same(ep, Branchy(), (torch.ones(3),), (-torch.ones(3),))


def test_draft_export_names_the_users_variable_in_its_check():
    class Item(torch.nn.Module):
        def forward(self, x, t):
            n = t.item()
            return x * 2 if n > 2 else x
    issue, = gp.draft_export(Item(), (torch.randn(3), torch.tensor(5)))._report.failures
    assert issue.fix == "state the answer before this line, with torch._check(n > 2)"


def test_a_write_whose_aliasing_depends_on_data_suggests_a_clone_that_exports():
    def written(x, count):
        y = rows(x, count).t().contiguous()
        y.add_(1)
        return x, y
    with pytest.raises(gp.DataDependentError) as info:
        gp.export(written, (torch.randn(8, 3), torch.tensor(4)))
    assert ".clone()" in _fix(info)

    def cloned(x, count):   # the fix applied: an explicit copy before the write
        y = rows(x, count).t().contiguous().clone()
        y.add_(1)
        return x, y
    ep = gp.export(cloned, (torch.randn(8, 3), torch.tensor(4)))
    for k in (0, 1, 2, 8):
        x = torch.randn(8, 3)
        torch.testing.assert_close(ep.module()(x.clone(), torch.tensor(k)), cloned(x.clone(), torch.tensor(k)))


class _Pair(torch.nn.Module):
    def forward(self, x):
        return {"sum": x + 1, "prod": x * 2}


class _Twice(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.pair = _Pair()

    def forward(self, x):
        out = self.pair(x)
        return out["sum"] - out["prod"]


def test_a_swapped_in_module_with_another_structure_is_told_to_return_the_original_one():
    x = torch.randn(2, 3)
    unflat = gp.unflatten(gp.export(_Twice(), (x,), preserve_module_call_signature=("pair",)))

    class SumOnly(torch.nn.Module):
        def forward(self, x):
            return x + 1
    unflat.set_submodule("pair", SumOnly())
    with pytest.raises(gp.CallSignatureError) as info:
        unflat(x)
    assert "return exactly the structure the original returned" in _fix(info)

    class SameStructure(torch.nn.Module):   # the fix applied: the original's containers and keys
        def forward(self, x):
            return {"sum": x + 1, "prod": x * 3}
    unflat.set_submodule("pair", SameStructure())
    torch.testing.assert_close(unflat(x), (x + 1) - x * 3)
