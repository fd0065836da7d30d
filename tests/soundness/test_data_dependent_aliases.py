"""A view-or-copy call (`contiguous()`, `reshape`, `flatten`) on a tensor whose size depends on
data cannot be decided at capture: at a size of 0 or 1 eager returns a view, above a copy.
The values are the same either way, so such a call is captured as a copy; a later in-place
write into its result or its source would reach the source only at some sizes, so that
write is refused at export, with the fix. So is one whose choice depends on dims the spec
leaves unrelated (`Dim.AUTO` dims before the program equates them)."""
import pytest
import torch

import graphport as gp


def _rows(x, count):
    k = count.item()
    torch._check(k >= 0)
    torch._check(k <= x.shape[0])
    return x[:k]


def write_into_result(x, count):
    y = _rows(x, count).t().contiguous()
    y.add_(1)   # WRITE
    return x


def write_into_source(x, count):
    y = _rows(x, count).t().reshape(-1)
    x.mul_(2)   # WRITE
    return y


def no_write(x, count):
    return _rows(x, count).t().reshape(-1) * 2


def explicit_copy(x, count):
    y = _rows(x, count).t().contiguous().clone()
    y.add_(1)
    return x, y


@pytest.mark.parametrize("program", [write_into_result, write_into_source])
def test_a_write_whose_aliasing_depends_on_data_is_refused_at_its_line(program):
    with pytest.raises(gp.DataDependentError) as caught:
        gp.export(program, (torch.randn(8, 3), torch.tensor(4)))
    assert caught.value.location.lineno == _line_of(program, "# WRITE")
    assert "view" in caught.value.what and "clone()" in caught.value.fix
    assert isinstance(caught.value, RuntimeError)


@pytest.mark.parametrize("program", [no_write, explicit_copy])
def test_without_such_a_write_the_program_exports_and_matches_eager_at_every_count(program):
    ep = gp.export(program, (torch.randn(8, 3), torch.tensor(4)))
    for k in (0, 1, 2, 8):
        x = torch.randn(8, 3)
        got, want = ep.module()(x.clone(), torch.tensor(k)), program(x.clone(), torch.tensor(k))
        torch.testing.assert_close(got, want)


def reshape_before_the_equality(x, w):
    y = x.t().reshape_as(w)   # a view of x where the two dims are equal, a copy where not
    y.add_(1)   # WRITE
    return x


def test_a_write_whose_aliasing_depends_on_unrelated_dims_is_refused_at_its_line():
    spec = ({0: gp.Dim.AUTO}, {1: gp.Dim.AUTO})
    with pytest.raises(gp.UnsupportedFeatureError) as caught:
        gp.export(reshape_before_the_equality, (torch.randn(4, 3), torch.randn(3, 4)), dynamic_shapes=spec)
    assert caught.value.location.lineno == _line_of(reshape_before_the_equality, "# WRITE")
    assert "clone()" in caught.value.fix and "dynamic_shapes" in caught.value.fix
    assert isinstance(caught.value, RuntimeError)


def _line_of(fn, marker: str) -> int:
    import inspect
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if marker in line)
