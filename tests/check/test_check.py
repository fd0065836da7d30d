"""graphport.check: correct programs pass across their contract; wrong ones are caught and shrunk."""
import pytest
import torch

import graphport as gp
from graphport import runtime


class TokenModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 4)
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, ids, x):
        return self.lin(self.emb(ids)) + x[:, :1]


def token_export():
    model = TokenModel()
    ids, x = torch.randint(0, 10, (2, 5)), torch.randn(2, 5, 3)
    batch, seq = gp.Dim("batch", max=8), gp.Dim("seq", min=1, max=16)
    ep = gp.export(model, (ids, x), dynamic_shapes={"ids": {0: batch, 1: seq}, "x": {0: batch, 1: seq}})
    return model, ep


class Double(torch.nn.Module):
    def forward(self, x):
        return x * 2


def double_export(max_n=32):
    return gp.export(Double(), (torch.randn(6, 3),), dynamic_shapes={"x": {0: gp.Dim("n", max=max_n)}})


def test_a_correct_program_passes_inside_and_is_refused_outside():
    model, ep = token_export()
    report = gp.check(model, ep, samples=12)
    assert report.passed, str(report)
    assert report.samples == 12 and report.agreements == 12
    # batch above 8, seq below 1 and above 16, and the relation (batch 0 with seq 1) broken
    assert report.out_of_contract >= 3 and report.refusals == report.out_of_contract
    assert "PASSED" in str(report) and "12 agree" in report.summary()


def test_boundaries_and_small_sizes_are_drawn():
    model, ep = token_export()
    seen = []
    original = gp.check.__globals__["_Checker"]._compare

    def spy(self, sizes):
        seen.append({s.name: v for s, v in sizes.items()})
        return original(self, sizes)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(gp.check.__globals__["_Checker"], "_compare", spy)
        gp.check(model, ep, samples=12)
    batches = {d["s0"] for d in seen}
    seqs = {d["s1"] for d in seen}
    assert {0, 1, 8} <= batches and {1, 2, 16} <= seqs


def test_check_exports_from_example_args():
    report = gp.check(Double(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: gp.Dim("n", max=10)}}, samples=5)
    assert report.passed and report.samples == 5 and report.refusals == 1


def test_a_program_wrong_from_some_size_on_is_caught_and_shrunk_to_that_size():
    class DoubleExceptLarge(torch.nn.Module):   # the program computes x * 2 everywhere
        def forward(self, x):
            return x * 2 if x.shape[0] < 5 else x * 2 + 1

    report = gp.check(DoubleExceptLarge(), double_export(), samples=10)
    assert not report.passed
    kinds = {f.kind for f in report.findings}
    assert kinds == {"mismatch"}
    assert [f.sizes for f in report.findings] == [{"n": 5}]
    assert report.findings[0].shapes == {"x": [5, 3]}
    assert "FAILED" in str(report) and "mismatch at {'n': 5}" in str(report)


def test_an_edited_graph_is_caught_and_shrunk_to_the_smallest_size_where_it_differs():
    ep = gp.export(torch.add, (torch.randn(6, 3), torch.randn(6, 3)),
                   dynamic_shapes=({0: gp.Dim("n", max=32)}, {0: gp.Dim("n", max=32)}))
    for node in ep.graph.nodes:
        if node.target is torch.ops.aten.add.Tensor:
            node.target = torch.ops.aten.sub.Tensor
    ep.graph_module.recompile()
    report = gp.check(torch.add, ep, samples=8)
    # at n == 0 add and sub agree (empty), so the smallest failing size is 1
    assert [(f.kind, f.sizes) for f in report.findings] == [("mismatch", {"n": 1})]
    assert report.findings[0].first_seen != {"n": 1}


def test_an_input_outside_the_contract_that_runs_is_reported(monkeypatch):
    monkeypatch.setattr(runtime, "check_shapes", lambda *a, **k: None)
    report = gp.check(Double(), double_export(max_n=10), samples=3)
    assert [(f.kind, f.sizes) for f in report.findings] == [("not refused", {"n": 11})]
    assert "above its maximum 10" in report.findings[0].detail


def test_an_in_range_refusal_is_reported(monkeypatch):
    def refuse_odd(contract, flat, paths):
        if flat[0].shape[0] % 2:
            raise gp.InputGuardError("odd sizes refused", fix="none")

    monkeypatch.setattr(runtime, "check_shapes", refuse_odd)
    monkeypatch.setattr(runtime, "build_input_checker", lambda *a, **k: None)   # calls take the general checks
    report = gp.check(Double(), double_export(), samples=10)
    assert {f.kind for f in report.findings} == {"refused in range"}
    assert [f.sizes for f in report.findings][0] == {"n": 1}


def test_derived_dimensions_keep_their_relation_and_breaking_it_is_refused():
    def f(x, y):
        return x[1:] + y

    n = gp.Dim("n", min=1, max=20)
    report = gp.check(f, (torch.randn(5), torch.randn(4)), dynamic_shapes=({0: n + 1}, {0: n}), samples=8)
    assert report.passed, str(report)
    assert report.samples == 8 and report.refusals == report.out_of_contract >= 3


def test_state_the_model_mutates_starts_equal_for_every_sample():
    model = torch.nn.BatchNorm1d(3).train()
    report = gp.check(model, (torch.randn(4, 3),), dynamic_shapes={"input": {0: gp.Dim("b", min=2, max=16)}},
                      samples=6)
    assert report.passed, str(report)


def test_input_mutations_are_compared():
    def bump(x):
        x.add_(1)
        return x.sum()

    report = gp.check(bump, (torch.randn(4),), dynamic_shapes=({0: gp.Dim("n", max=9)},), samples=6)
    assert report.passed, str(report)


def test_a_static_program_is_checked_once():
    report = gp.check(Double(), (torch.randn(2, 3),), samples=10)
    assert report.passed and report.samples == 1 and report.out_of_contract == 0


def test_unbounded_dims_are_capped_with_a_note():
    ep = gp.export(Double(), (torch.randn(6, 3),), dynamic_shapes={"x": {0: gp.Dim("n")}})
    report = gp.check(Double(), ep, samples=4, max_size=12)
    assert report.passed and any("drawn up to 12" in n for n in report.notes)


def test_progress_is_reported_for_every_input():
    calls = []
    gp.check(Double(), double_export(max_n=10), samples=4, progress=lambda done, total: calls.append((done, total)))
    assert calls == [(i, 5) for i in range(1, 6)]


def test_a_wrong_second_argument_is_a_graphport_error():
    with pytest.raises(gp.UnsupportedInputError, match="ExportedProgram or a tuple"):
        gp.check(Double(), torch.randn(3))


def test_the_models_buffers_are_left_as_they_were():
    model = torch.nn.BatchNorm1d(3).train()
    before = model.running_mean.clone()
    ep = gp.export(model, (torch.randn(4, 3),), dynamic_shapes={"input": {0: gp.Dim("b", min=2, max=16)}})
    model.running_mean.copy_(before)   # export itself may run the model once
    gp.check(model, ep, samples=4)
    assert torch.equal(model.running_mean, before)


def test_random_operators_draw_alike_in_the_program_and_in_eager():
    class Noisy(torch.nn.Module):
        def forward(self, x):
            return x + torch.rand_like(x)

    ep = gp.export(Noisy(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: gp.Dim("n", max=9)}})
    state = torch.random.get_rng_state()
    report = gp.check(Noisy(), ep, samples=4)
    assert report.passed, str(report)
    assert torch.equal(torch.random.get_rng_state(), state)


def test_inputs_eager_rejects_must_fail_in_the_program_too():
    class TakesFirstRow(torch.nn.Module):   # eager fails on an empty x; so does the program
        def forward(self, x):
            return x[0] * 2

    report = gp.check(TakesFirstRow(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: gp.Dim("n", max=9)}},
                      samples=6)
    assert report.passed, str(report)


def test_one_tensor_passed_for_two_inputs_is_passed_twice_again():
    def add_self(x, y):
        return x + y

    x = torch.randn(4, 3)
    report = gp.check(add_self, (x, x), dynamic_shapes=({0: gp.Dim("n", max=9)}, {0: gp.Dim("n", max=9)}), samples=4)
    assert report.passed, str(report)


def test_a_derived_dimension_that_would_go_negative_outside_the_range_is_not_drawn():
    def f(x, y):
        return x[1:] + y

    n = gp.Dim("n", min=1, max=9)   # n = 0, just below the range, would make y of size -1
    report = gp.check(f, (torch.randn(5), torch.randn(4)), dynamic_shapes=({0: n}, {0: n - 1}), samples=4)
    assert report.passed, str(report)
    assert report.out_of_contract == report.refusals == 2   # n = 10, and y one larger than n - 1
