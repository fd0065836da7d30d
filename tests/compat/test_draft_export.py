"""draft_export: a program plus a report of the shape problems worked around, each with
its file:line and the fix, the way torch.export's draft_export reports them."""
from __future__ import annotations


import pytest
import torch
import torch.export

import graphport as gp


class Related(torch.nn.Module):
    def forward(self, x, y):
        return x + y  # <- here


def test_draft_export_returns_a_program_and_reports_the_guards(ex):
    spec = {"x": {0: ex.Dim("d"), 1: ex.Dim("f", max=8)}, "y": {0: ex.Dim("e")}}
    x, y = torch.randn(4, 3), torch.randn(4, 3)
    with pytest.raises(RuntimeError):
        ex.export(Related(), (x, y), dynamic_shapes=spec)
    ep = ex.draft_export(Related(), (x, y), dynamic_shapes=spec)
    assert not ep._report.successful() and ep._report.failures
    x2, y2 = torch.randn(6, 3), torch.randn(6, 3)
    torch.testing.assert_close(ep.module()(x2, y2), x2 + y2)


def test_graphport_report_names_each_issue_with_its_line_and_fix():
    spec = {"x": {0: gp.Dim("d"), 1: gp.Dim("f", max=8)}, "y": {0: gp.Dim("e")}}
    ep = gp.draft_export(Related(), (torch.randn(4, 3), torch.randn(4, 3)), dynamic_shapes=spec)
    issues = ep._report.failures
    assert sorted(i.fix for i in issues) == ["e = d", "f = 3"]
    for issue in issues:
        assert issue.location.filename == __file__
        assert "# <- here" in issue.location.code
    # the refined spec is one export accepts as is
    again = gp.export(Related(), (torch.randn(4, 3), torch.randn(4, 3)), dynamic_shapes=ep._report.dynamic_shapes)
    assert str(again.graph_module.code) == str(ep.graph_module.code)
    assert "2 issue(s)" in str(ep._report)


def test_draft_export_without_issues_is_export():
    x = torch.randn(4, 3)
    ep = gp.draft_export(Related(), (x, x.clone()), dynamic_shapes={"x": {0: gp.Dim("d")}, "y": {0: gp.Dim("d")}})
    assert ep._report.successful()


def test_problem_it_cannot_work_around_keeps_its_error_with_the_report():
    class Loop(torch.nn.Module):
        def forward(self, x, n):
            for _ in range(n.item()):   # a Python loop bound: the program needs the value as an int
                x = x * 2
            return x
    with pytest.raises(gp.DataDependentError) as err:
        gp.draft_export(Loop(), (torch.randn(3), torch.tensor(2)))
    assert err.value.report.successful()


# -- data-dependent questions: answered from the example, checked at run time -------------------

class Branch(torch.nn.Module):
    def forward(self, x):
        return x + 1 if x.sum() > 0 else x - 1  # <- branch


class ItemSlice(torch.nn.Module):
    def forward(self, x, y):
        n = y.item()
        return x[:n] * 2 if n > 2 else x  # <- item


class EvenRows(torch.nn.Module):
    def forward(self, x):
        idx = x.nonzero()
        return idx.reshape(-1, 4) if idx.shape[0] % 2 == 0 else idx  # <- nonzero


DATA_DEPENDENT = {
    # program, example, inputs on the same path, inputs on the other path
    "branch": (Branch, (torch.ones(3),), [(torch.rand(3) + 0.1,)], [(-torch.ones(3),)]),
    "item": (ItemSlice, (torch.randn(8, 2), torch.tensor(4)), [(torch.randn(8, 2), torch.tensor(7))],
             [(torch.randn(8, 2), torch.tensor(1))]),
    "nonzero": (EvenRows, (torch.tensor([[1., 0], [0, 2]]),), [(torch.tensor([[1., 2], [0, 0]]),)],
                [(torch.tensor([[1., 0], [0, 0]]),)]),
}


@pytest.mark.parametrize("case", sorted(DATA_DEPENDENT))
def test_data_dependent_question_answered_from_the_example(ex, case):
    cls, example, same_path, other_path = DATA_DEPENDENT[case]
    with pytest.raises(RuntimeError):
        ex.export(cls(), example)
    ep = ex.draft_export(cls(), example)
    assert len(ep._report.failures) == 1
    for args in [example, *same_path]:
        torch.testing.assert_close(ep.module()(*args), cls()(*args))
    for args in other_path:   # the answer is checked: another path is refused, never computed wrongly
        with pytest.raises(RuntimeError):
            ep.module()(*args)


@pytest.mark.parametrize("case", sorted(DATA_DEPENDENT))
def test_graphport_reports_the_line_and_the_check_to_add(case):
    cls, example, _, other_path = DATA_DEPENDENT[case]
    ep = gp.draft_export(cls(), example)
    (issue,) = ep._report.failures
    assert issue.kind == "data-dependent" and "answered True from the example" in issue.what
    assert issue.location.filename == __file__ and f"# <- {case}" in issue.location.code
    if case == "branch":   # no torch._check settles a branch on a tensor: the fix is a traceable branch
        assert issue.fix.startswith("to keep both paths, branch with torch.cond(x.sum() > 0, ")
    else:
        assert issue.fix.endswith(")") and "torch._check(" in issue.fix
    assert "[data-dependent]" in str(ep._report)
    with pytest.raises(gp.RuntimeCheckError, match="stated at .*test_draft_export.py"):
        ep.module()(*other_path[0])
    # the program is one export accepts once the answer is stated: save and load keep the check
    assert any(n.target is torch.ops.aten._assert_scalar.default for n in ep.graph.nodes)


def test_stated_check_makes_export_accept_the_program():
    class Stated(torch.nn.Module):
        def forward(self, x, y):
            n = y.item()
            torch._check(n > 2)
            return x[:n] * 2 if n > 2 else x
    gp.export(Stated(), (torch.randn(8, 2), torch.tensor(4)))


def test_answers_and_spec_fixes_in_one_report():
    class Both(torch.nn.Module):
        def forward(self, x, y):
            s = x + y
            return s * 2 if s.sum() > 0 else s
    spec = {"x": {0: gp.Dim("d")}, "y": {0: gp.Dim("e")}}
    x = torch.ones(4, 3)
    ep = gp.draft_export(Both(), (x, x.clone()), dynamic_shapes=spec)
    assert sorted(i.kind for i in ep._report.failures) == ["data-dependent", "guard added"]
    x2 = torch.ones(6, 3)
    torch.testing.assert_close(ep.module()(x2, x2), Both()(x2, x2))
