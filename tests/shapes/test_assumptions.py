"""Answers that rely on sizes being large are remembered, so smaller sizes get proven.

Kernels ask "is this size 1?" through fast paths (`guard_or_false`, `guard_size_oblivious`,
`statically_known_true`) that must not add guards. An answer that only holds for sizes of
at least 2 is still an assumption the program now depends on: the shape environment must
record it, or a size of 1 would run a program captured for larger sizes."""
import sympy
import torch

import graphport as gp
from graphport.capture.dead_code import eliminate_dead_code
from graphport.ops.kinds import is_impure
from graphport.shapes.env import ShapeEnv
from graphport.shapes.expr import ValueRange
from graphport.shapes.node import SymNode


def _env():
    env = ShapeEnv()
    s = env.create_symbol(4, ValueRange(0, 10), "n", (0, 0))
    return env, s


def _question(env, rel):
    return SymNode(rel, env, bool)


def test_size_oblivious_answer_records_the_assumption_it_needed():
    env, s = _env()
    assert _question(env, sympy.Eq(s, 1)).guard_size_oblivious() is False
    assert env.assumed_min.get(s, 0) >= 2 and not env.guards


def test_guard_or_false_answer_from_large_sizes_is_remembered():
    env, s = _env()
    assert _question(env, sympy.Ne(s, 1)).guard_or_false() is True
    assert env.assumed_min.get(s, 0) >= 2 and not env.guards


def test_an_answer_the_declared_range_settles_assumes_nothing():
    env, s = _env()
    assert _question(env, sympy.Ge(s, 0)).guard_or_false() is True
    assert not env.assumed_min and not env.guards


def test_assumptions_never_exceed_the_example_size():
    env = ShapeEnv()
    s = env.create_symbol(2, ValueRange(0, 10), "n", (0, 0))
    # "(n + 1) // 2 == 1" holds at the example n = 2: no assumption may decide it False
    assert _question(env, sympy.Eq((s + 1) // 2, 1)).guard_or_false() is False
    assert env.assumed_min.get(s, 0) <= 2


def test_program_that_branches_on_size_one_is_refused_at_export_not_answered_wrong():
    def f(x):
        return x + 1 if x.shape[0] != 1 else x - 1
    try:
        ep = gp.export(f, (torch.randn(4, 3),), dynamic_shapes=({0: gp.Dim("n", min=1, max=8)},))
    except gp.ConstraintViolationError as e:
        assert "n = 1" in str(e) and "min=2" in str(e)
        return
    x = torch.randn(1, 3)
    torch.testing.assert_close(ep.module()(x), f(x))


def test_random_and_mutating_ops_are_impure():
    aten = torch.ops.aten
    assert is_impure(aten.rand.default) and is_impure(aten.bernoulli.p) and is_impure(aten.add_.Tensor)
    assert not is_impure(aten.add.Tensor) and not is_impure(aten.view.default)


def test_dead_code_keeps_impure_and_user_calls_and_drops_the_rest():
    import torch.fx as fx
    g = fx.Graph()
    x = g.placeholder("x")
    rand = g.call_function(torch.ops.aten.rand.default, ([3],))
    user = g.call_function(torch.ops.aten.neg.default, (x,))
    helper = g.call_function(torch.ops.aten.relu.default, (x,))
    g.output((x,))
    eliminate_dead_code(g, {user})
    assert rand in g.nodes and user in g.nodes and helper not in g.nodes


def test_unused_index_that_fails_at_small_sizes_still_fails():
    def f(x):
        x[torch.tensor([1, 0])]   # unused, but eager raises when x has one row
        return x * 2
    ep = gp.export(f, (torch.randn(2, 4),), dynamic_shapes=({0: gp.Dim("n", min=0, max=16)},))
    import pytest
    with pytest.raises(Exception):
        f(torch.randn(1, 4))
    with pytest.raises(Exception):
        ep.module()(torch.randn(1, 4))
    torch.testing.assert_close(ep.module()(torch.randn(3, 4).clone()).shape, torch.Size([3, 4]))


def test_a_size_where_the_program_fails_is_refused_at_call_time_with_the_reason():
    def f(x):
        return x.reshape(x.shape[0], -1, 2).sum(-1)   # at 0 rows eager cannot infer the -1
    ep = gp.export(f, (torch.randn(3, 4),), dynamic_shapes=({0: gp.Dim("n", min=0, max=8)},))
    assert any("n < 1" in note for note in ep.shape_report), ep.shape_report
    import pytest
    with pytest.raises(Exception):
        f(torch.randn(0, 4))
    with pytest.raises(AssertionError) as info:   # InputGuardError: torch's "Guard failed" class
        ep.module()(torch.randn(0, 4))
    assert isinstance(info.value, gp.InputGuardError)
    assert "valid only for n >= 1" in str(info.value) and "export a separate program" in info.value.fix
    for n in (1, 2, 5, 8):
        x = torch.randn(n, 4)
        torch.testing.assert_close(ep.module()(x), f(x))


def test_a_question_guarded_over_and_over_ends_export_with_an_error():
    import pytest
    env, s = _env()
    question = sympy.Gt(s * s, s + 7)   # true at the example (4), not settled by the range [0, 10]
    with pytest.raises(gp.UnsupportedFeatureError) as info:
        for _ in range(1000):
            env.evaluate(question)
    assert "over and over" in str(info.value) and "torch._check" in info.value.fix
    assert isinstance(info.value, RuntimeError)
