"""draft_export: a program plus a report of the shape problems worked around, each with
its file:line and the fix, the way torch.export's draft_export reports them."""
from __future__ import annotations

import types

import pytest
import torch
import torch.export

import graphport as gp

EXPORTERS = {
    "graphport": types.SimpleNamespace(draft_export=gp.draft_export, export=gp.export, Dim=gp.Dim),
    "torch": types.SimpleNamespace(draft_export=torch.export.draft_export, export=torch.export.export,
                                   Dim=torch.export.Dim),
}


@pytest.fixture(params=list(EXPORTERS))
def ex(request):
    return EXPORTERS[request.param]


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
    class Branch(torch.nn.Module):
        def forward(self, x):
            return x + 1 if x.sum() > 0 else x - 1
    with pytest.raises(gp.DataDependentError) as err:
        gp.draft_export(Branch(), (torch.randn(3),))
    assert err.value.report.successful()
