"""Every user-facing error names the user's line and a fix: the less common ones."""
import pytest
import torch

import graphport as gp

GLOBAL_COUNTER = torch.zeros(3)
ESCAPED = []


def _line_of(marker: str) -> int:
    with open(__file__) as f:
        return next(i for i, line in enumerate(f, 1) if marker in line and "_line_of" not in line)


def _check(err: gp.GraphportError, marker: str, fix_words: str):
    text = str(err)
    assert f"test_more_errors.py:{_line_of(marker)}" in text, text
    assert "fix:" in text and fix_words in text, text


def test_in_place_write_into_a_global_tensor():
    def f(x):
        GLOBAL_COUNTER.add_(x)  # MARK-global
        return x
    with pytest.raises(gp.UnsupportedFeatureError) as info:
        gp.export(f, (torch.randn(3),))
    _check(info.value, "MARK-global", "register_buffer")


def test_in_place_op_that_changes_metadata():
    def f(x):
        y = x.clone()
        y.unsqueeze_(0)  # MARK-meta
        return y
    with pytest.raises(gp.UnsupportedFeatureError) as info:
        gp.export(f, (torch.randn(3),))
    _check(info.value, "MARK-meta", "x = x.unsqueeze(")


def test_out_argument_that_would_be_resized():
    def f(x):
        out = torch.empty(0)
        torch.add(x, 1, out=out)  # MARK-resize
        return out
    with pytest.raises(gp.UnsupportedFeatureError) as info:
        gp.export(f, (torch.randn(3),))
    _check(info.value, "MARK-resize", "new variable")


def test_tracer_kept_past_the_capture():
    def f(x):
        ESCAPED.append(x * 2)
        return x
    gp.export(f, (torch.randn(3),))
    with pytest.raises(gp.UnsupportedFeatureError) as info:
        ESCAPED.pop() + 1  # MARK-escape
    _check(info.value, "MARK-escape", "do not keep tensors")


def test_operator_rejecting_its_arguments():
    def f(x, y):
        return x @ y  # MARK-matmul
    with pytest.raises(gp.OperatorError) as info:
        gp.export(f, (torch.randn(2, 3), torch.randn(4, 5)))
    _check(info.value, "MARK-matmul", "check the shapes and dtypes")


def test_aliased_inputs_must_stay_aliased():
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True).eval()
    x = torch.randn(2, 3, 8)
    ep = gp.export(mha, (x, x, x))
    with pytest.raises(gp.InputMismatchError) as info:
        ep.module()(x, x.clone(), x)  # MARK-alias
    _check(info.value, "MARK-alias", "same tensor")
