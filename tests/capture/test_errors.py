"""Every user error of static-shape capture: the right graphport exception, naming the
user's file:line (this file) and carrying a concrete `fix:`."""
from __future__ import annotations

import inspect
import os
import re

import pytest
import torch

import graphport as gp

THIS_FILE = os.path.basename(__file__)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def here() -> int:
    """The caller's line number."""
    return inspect.currentframe().f_back.f_lineno


def line_of(fn, code: str) -> int:
    """Line number (in this file) of the first line of `fn` containing `code`."""
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, text in enumerate(lines) if code in text)


def assert_user_error(err: gp.GraphportError, lines, *needles: str):
    """The message names this file at one of `lines`, has a fix, and mentions each needle."""
    msg = str(err)
    lines = [lines] if isinstance(lines, int) else lines
    assert any(f"{THIS_FILE}:{n}" in msg for n in lines), \
        f"expected {THIS_FILE}:{' or '.join(map(str, lines))} in the message:\n{msg}"
    assert "fix:" in msg, f"no 'fix:' line in:\n{msg}"
    for needle in needles:
        assert needle in msg, f"expected {needle!r} in the message:\n{msg}"
    return msg


def assert_names_input(msg: str, positional: str, named: str):
    """The input path is named either positionally (`args[0]['a']`) or through the
    parameter's name (`d['a']`); both tell the user which input it is."""
    token = r"(?<![\w\].]){}(?![\w\[])"
    assert any(re.search(token.format(re.escape(p)), msg) for p in (positional, named)), \
        f"expected the input named as {positional} or {named} in:\n{msg}"


# ----------------------------------------------------------------------------- data-dependent

def sum_branch(x):
    if x.sum() > 0:
        return x + 1
    return x - 1


def bool_of_tensor(x):
    flag = bool((x > 0).all())
    return x * 2 if flag else x


def item_feeds_if(x):
    m = x.max().item()
    if m > 0.5:
        return x * 2
    return x


def to_numpy(x):
    arr = x.numpy()
    return torch.from_numpy(arr * 2)


@pytest.mark.parametrize("fn, code", [
    (sum_branch, "if x.sum() > 0"),
    (bool_of_tensor, "flag = bool("),
    (to_numpy, "x.numpy()"),
], ids=["if-sum", "bool", "numpy"])
def test_data_dependent_python(fn, code):
    with pytest.raises(gp.DataDependentError) as err:
        gp.export(fn, (torch.randn(3),))
    msg = assert_user_error(err.value, line_of(fn, code))
    assert "cond" in msg or "torch._check" in msg


def test_item_feeding_if():
    """`.item()` may be captured; the `if` on its value cannot. Either line is accepted."""
    with pytest.raises(gp.DataDependentError) as err:
        gp.export(item_feeds_if, (torch.randn(3),))
    msg = assert_user_error(err.value, [line_of(item_feeds_if, "if m > 0.5"), line_of(item_feeds_if, ".item()")])
    assert "cond" in msg or "torch._check" in msg


def test_data_dependent_inside_module_forward():
    class Gate(torch.nn.Module):
        def forward(self, x):
            if (x > 0).any():
                return x.relu()
            return x
    with pytest.raises(gp.DataDependentError) as err:
        gp.export(Gate(), (torch.randn(4),))
    assert_user_error(err.value, line_of(Gate.forward, "if (x > 0).any()"))


# ----------------------------------------------------------------------------- operators without meta

@torch.library.custom_op("gptest::nometa", mutates_args=())
def nometa(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + 1


def uses_nometa(x):
    return nometa(x).relu()


def test_op_without_fake_kernel_then_with_register_fake():
    with pytest.raises(gp.UnsupportedOperatorError) as err:
        gp.export(uses_nometa, (torch.randn(3),))
    assert_user_error(err.value, line_of(uses_nometa, "return nometa(x)"), "gptest::nometa", "register_fake")

    nometa.register_fake(lambda x: torch.empty_like(x))
    x = torch.randn(3)
    ep = gp.export(uses_nometa, (x,))
    assert "gptest.nometa.default" in {str(n.target) for n in ep.graph.nodes}
    torch.testing.assert_close(ep.module()(x), uses_nometa(x))


# ----------------------------------------------------------------------------- unsupported inputs

class Opaque:
    pass


def takes_dict(d):
    return d["b"] * 2


def test_set_input_names_its_path():
    with pytest.raises(gp.UnsupportedInputError) as err:
        line = here() + 1
        gp.export(takes_dict, ({"a": {1, 2}, "b": torch.randn(2)},))
    assert_names_input(assert_user_error(err.value, line, "set"), "args[0]['a']", "d['a']")


def test_arbitrary_object_input_names_its_path():
    def f(x, obj):
        return x + 1
    with pytest.raises(gp.UnsupportedInputError) as err:
        line = here() + 1
        gp.export(f, (torch.randn(2), Opaque()))
    assert_names_input(assert_user_error(err.value, line, "Opaque"), "args[1]", "obj")


def test_arbitrary_object_kwarg_names_its_path():
    def f(x, *, opt=None):
        return x + 1
    with pytest.raises(gp.UnsupportedInputError) as err:
        line = here() + 1
        gp.export(f, (torch.randn(2),), {"opt": Opaque()})
    assert_names_input(assert_user_error(err.value, line, "Opaque"), "kwargs['opt']", "opt")


# ----------------------------------------------------------------------------- ep.module() input checks

def double(x):
    return x * 2


def test_call_with_wrong_shape():
    m = gp.export(double, (torch.randn(2, 3),)).module()
    with pytest.raises(gp.InputMismatchError) as err:
        line = here() + 1
        m(torch.randn(4, 3))
    msg = assert_user_error(err.value, line)
    assert_names_input(msg, "args[0]", "x")
    assert re.search(r"shape\[0\]|dim(ension)? 0", msg), msg
    assert re.search(r"\b2\b", msg) and re.search(r"\b4\b", msg), msg


def test_call_with_wrong_dtype():
    m = gp.export(double, (torch.randn(2, 3),)).module()
    with pytest.raises(gp.InputMismatchError) as err:
        line = here() + 1
        m(torch.randn(2, 3, dtype=torch.float64))
    assert_names_input(assert_user_error(err.value, line, "float32", "float64"), "args[0]", "x")


def test_call_with_wrong_structure():
    def f(d):
        return d["a"] + d["b"]
    m = gp.export(f, ({"a": torch.randn(2), "b": torch.randn(2)},)).module()
    with pytest.raises(gp.InputMismatchError) as err:
        line = here() + 1
        m({"a": torch.randn(2)})
    assert_names_input(assert_user_error(err.value, line, "'b'"), "args[0]", "d")


def test_call_with_extra_argument():
    m = gp.export(double, (torch.randn(2),)).module()
    with pytest.raises(gp.InputMismatchError) as err:
        line = here() + 1
        m(torch.randn(2), torch.randn(2))
    assert_user_error(err.value, line)


def test_call_with_other_value_of_specialized_scalar():
    def scale(x, k):
        return x * k
    m = gp.export(scale, (torch.randn(2), 3)).module()
    torch.testing.assert_close(m(torch.ones(2), 3), torch.full((2,), 3.0))
    with pytest.raises(gp.InputMismatchError) as err:
        line = here() + 1
        m(torch.ones(2), 4)
    msg = assert_user_error(err.value, line)
    assert_names_input(msg, "args[1]", "k")
    assert re.search(r"\b3\b", msg) and re.search(r"\b4\b", msg), msg


def test_errors_are_graphport_errors():
    assert issubclass(gp.DataDependentError, gp.GraphportError)
    for cls in (gp.UnsupportedOperatorError, gp.UnsupportedInputError, gp.InputMismatchError):
        assert issubclass(cls, gp.GraphportError)


def test_sparse_input_is_refused_with_the_input_named():
    def uses_sparse(x):
        return x.to_dense() * 2
    x = torch.eye(3).to_sparse_csr()
    with pytest.raises(gp.UnsupportedInputError) as err:
        gp.export(uses_sparse, (x,))
    assert "sparse_csr" in str(err.value) and "to_dense" in str(err.value)
