"""A tensor's Python-visible state read by forward: autograd flags, `.grad`, `_version`,
Python attributes set on a parameter, and torch modes the program enters.

Capture stands a tracer in for each tensor; whatever forward reads from it must be eager's
answer, or the read refused. Each program below branches on such a read, so a wrong
answer changes the output: compared with eager on the example and on fresh inputs (batch
sizes 0, 1 and more), with inputs that do and do not require grad, and under the grad modes
a caller uses around export and around the call.
"""
from __future__ import annotations

import contextlib

import pytest
import torch
import torch.nn as nn
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import graphport as gp
from graphport import Dim
from graphport.audit import BAKED
from graphport.errors import UnsupportedFeatureError

BATCH = {"x": {0: Dim.DYNAMIC}}
SIZES = (0, 1, 3, 6)

READS = {
    "requires_grad": lambda t: t.requires_grad,
    "is_leaf": lambda t: t.is_leaf,
    "grad_fn is None": lambda t: t.grad_fn is None,
}

GRAD_MODES = {
    "grad": contextlib.nullcontext,
    "no_grad": torch.no_grad,
    "inference_mode": torch.inference_mode,
}


class ReadsAutogradState(nn.Module):
    """Branches on `read` of an input, a computed value, a parameter, a frozen parameter, a
    buffer, a value computed under no_grad inside forward and one under enable_grad."""

    def __init__(self, read):
        super().__init__()
        self.read = read
        self.first = nn.Linear(4, 4)
        self.second = nn.Linear(4, 4)
        self.frozen = nn.Parameter(torch.randn(4), requires_grad=False)
        self.register_buffer("offset", torch.randn(4))

    def forward(self, x):
        y = self.first(x)
        with torch.no_grad():
            quiet = y * 2
        with torch.enable_grad():
            loud = self.first.weight * 2
        factors = [self.read(t) for t in (x, y, self.second.weight, self.frozen, self.offset, quiet, loud)]
        scale = sum(float(2 ** i) for i, f in enumerate(factors) if f)
        return self.second(y) * scale + self.offset


def _batch(n: int, requires_grad: bool) -> torch.Tensor:
    return torch.randn(n, 4, requires_grad=requires_grad)


def _agree(model, ep, x, mode=contextlib.nullcontext):
    with mode():
        expected = model(x)
        got = ep.module()(x)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


@pytest.mark.parametrize("mode", GRAD_MODES.values(), ids=GRAD_MODES.keys())
@pytest.mark.parametrize("requires_grad", [True, False], ids=["input-requires-grad", "plain-input"])
@pytest.mark.parametrize("read", READS.values(), ids=READS.keys())
def test_autograd_state_reads_answer_as_eager(read, requires_grad, mode):
    torch.manual_seed(0)
    model = ReadsAutogradState(read)
    example = _batch(3, requires_grad)
    with mode():
        ep = gp.export(model, (example,), dynamic_shapes=BATCH)
    for n in SIZES:
        _agree(model, ep, _batch(n, requires_grad) if n != 3 else example, mode)


@pytest.mark.parametrize("read", READS.values(), ids=READS.keys())
def test_autograd_state_reads_agree_with_torch_export(read):
    torch.manual_seed(0)
    model = ReadsAutogradState(read)
    x = _batch(3, True)
    ours = gp.export(model, (x,)).module()(x)
    theirs = torch.export.export(model, (x,)).module()(x)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=0)


def test_requires_grad_of_a_value_from_an_earlier_layer():
    class TwoLinears(nn.Module):
        def __init__(self):
            super().__init__()
            self.first = nn.Linear(4, 4)
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            x = self.first(x)
            return self.lin(x) * (5.0 if x.requires_grad else 7.0)
    torch.manual_seed(0)
    model = TwoLinears()
    ep = gp.export(model, (_batch(4, False),), dynamic_shapes=BATCH)
    for n in SIZES:
        _agree(model, ep, _batch(n, False))


def test_a_flag_set_by_the_program_is_eagers():
    class MakesALeaf(nn.Module):
        def forward(self, x):
            w = torch.ones(4, requires_grad=True)
            v = torch.zeros(4).requires_grad_()
            return x * (2.0 if w.requires_grad and w.is_leaf else 3.0) * (5.0 if v.grad_fn is None else 7.0)
    model = MakesALeaf()
    ep = gp.export(model, (_batch(3, False),), dynamic_shapes=BATCH)
    for n in SIZES:
        _agree(model, ep, _batch(n, False))


def test_a_read_answer_is_reported_as_baked_where_a_call_would_differ():
    """Exported with an input that requires grad, the program answers for such inputs: a call
    with a plain input would take the other branch in eager. The finding says so, with the line."""
    class Branches(nn.Module):
        def forward(self, x):
            return x * (2.0 if x.requires_grad else 3.0)
    ep = gp.export(Branches(), (_batch(3, True),))
    (finding,) = [e for e in ep.python_effects if "requires_grad" in e.what]
    assert finding.kind == BAKED
    assert "True" in finding.what and "grad mode" in finding.what
    assert finding.location.filename == __file__
    assert "x.requires_grad" in finding.location.code
    plain = _batch(3, False)
    assert not torch.equal(ep.module()(plain), Branches()(plain))   # what the finding warns of


class ReadsGradOfAParameter(nn.Module):
    def __init__(self, read):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.read = read

    def forward(self, x):
        return self.lin(x) * self.read(self.lin.weight)


@pytest.mark.parametrize("grad_set", [True, False], ids=["grad-set", "grad-none"])
@pytest.mark.parametrize("read", [lambda w: 2.0 if w.grad is None else 3.0, lambda w: w.grad.sum()],
                         ids=["is-none", "values"])
def test_grad_of_a_parameter_is_refused(read, grad_set):
    model = ReadsGradOfAParameter(read)
    if grad_set:
        model.lin.weight.grad = torch.ones(4, 4)
    with pytest.raises(UnsupportedFeatureError, match=r"reads `\.grad` of a parameter") as caught:
        gp.export(model, (_batch(3, False),))
    assert isinstance(caught.value, RuntimeError)
    assert caught.value.location.filename == __file__
    assert "self.read(self.lin.weight)" in caught.value.location.code or "w.grad" in caught.value.location.code


def test_grad_of_a_computed_value_is_none_as_in_eager():
    class Computed(nn.Module):
        def forward(self, x):
            y = x * 2
            return y * (2.0 if y.grad is None else 3.0)
    model = Computed()
    ep = gp.export(model, (_batch(3, True),), dynamic_shapes=BATCH)
    for n in SIZES:
        _agree(model, ep, _batch(n, True))


def test_version_counter_is_refused():
    class Version(nn.Module):
        def forward(self, x):
            return x * (2.0 if x._version == 0 else 3.0)
    x = _batch(3, False)
    x.add_(1)   # eager's counter counts this write, made before the call
    with pytest.raises(UnsupportedFeatureError, match="_version") as caught:
        gp.export(Version(), (x,))
    assert "x._version" in caught.value.location.code


def test_other_uses_of_grad_fn_are_refused():
    class Named(nn.Module):
        def forward(self, x):
            y = x * 2
            return y * (2.0 if "Mul" in y.grad_fn.name() else 3.0)
    with pytest.raises(UnsupportedFeatureError, match=r"\.grad_fn\.name") as caught:
        gp.export(Named(), (_batch(3, True),))
    assert caught.value.location.filename == __file__


class PythonAttributeOnState(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4))
        self.w.scale = 2.0
        self.register_buffer("b", torch.randn(4))
        self.b.shift = 5.0

    def forward(self, x):
        return x * self.w * getattr(self.w, "scale", 1.0) + self.b * getattr(self.b, "shift", 1.0)


def test_python_attributes_of_a_parameter_and_a_buffer_are_seen():
    torch.manual_seed(0)
    model = PythonAttributeOnState()
    ep = gp.export(model, (_batch(3, False),), dynamic_shapes=BATCH)
    for n in SIZES:
        _agree(model, ep, _batch(n, False))
    # torch.export answers as if the attributes were not set: it differs from eager here
    x = _batch(3, False)
    assert not torch.allclose(torch.export.export(model, (x,)).module()(x), model(x))


def test_a_parameter_attribute_named_like_capture_own_is_refused():
    model = PythonAttributeOnState()
    model.w.gp_meta = 1.0
    with pytest.raises(UnsupportedFeatureError, match="gp_meta"):
        gp.export(model, (_batch(3, False),))


class DoubleAddmm(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        return out * 2 if func is torch.ops.aten.addmm.default else out


class DoubleLinear(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        return out * 2 if func is torch.nn.functional.linear else out


class ModeAroundOneLayer(nn.Module):
    def __init__(self, mode):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])
        self.mode = mode

    def forward(self, x):
        x = self.layers[0](x)
        with self.mode():
            x = self.layers[1](x)
        return self.layers[2](x)


def test_a_dispatch_mode_entered_in_forward_is_refused():
    torch.manual_seed(0)
    model = ModeAroundOneLayer(DoubleAddmm)
    with pytest.raises(UnsupportedFeatureError, match="TorchDispatchMode .*DoubleAddmm") as caught:
        gp.export(model, (_batch(3, False),))
    assert isinstance(caught.value, RuntimeError)
    assert caught.value.location.filename == __file__
    assert "self.layers[1](x)" in caught.value.location.code


def test_the_fix_for_an_observing_dispatch_mode_works():
    class Counting(TorchDispatchMode):
        calls = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Counting.calls += 1
            return func(*args, **(kwargs or {}))

    class Observed(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            with Counting() if not torch.compiler.is_exporting() else contextlib.nullcontext():
                return self.lin(x)
    torch.manual_seed(0)
    model = Observed()
    ep = gp.export(model, (_batch(3, False),), dynamic_shapes=BATCH)
    for n in SIZES:
        _agree(model, ep, _batch(n, False))


def test_a_function_mode_entered_in_forward_is_honoured():
    torch.manual_seed(0)
    model = ModeAroundOneLayer(DoubleLinear)
    ep = gp.export(model, (_batch(3, False),), dynamic_shapes=BATCH)
    for n in SIZES:
        _agree(model, ep, _batch(n, False))
    x = _batch(3, False)
    torch.testing.assert_close(ep.module()(x), torch.export.export(model, (x,)).module()(x))


def test_a_dispatch_mode_around_export_acts_at_call_time_as_torch_export():
    """The graph does not carry an outer dispatch mode: calling the program under the mode
    answers as eager under it, and without the mode as eager without it (as torch.export)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    with DoubleAddmm():
        ep = gp.export(model, (_batch(3, False),), dynamic_shapes=({0: Dim.DYNAMIC},))
    for n in SIZES:
        x = _batch(n, False)
        _agree(model, ep, x)
        _agree(model, ep, x, DoubleAddmm)
    x = _batch(3, False)
    with DoubleAddmm():
        theirs = torch.export.export(model, (x,))
    torch.testing.assert_close(ep.module()(x), theirs.module()(x))


def test_a_function_mode_around_export_is_recorded_as_torch_export_records_it():
    """An outer function mode runs during capture, on the program's calls: the graph holds what
    it did, as torch.export's does (the program as run under the mode)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    with DoubleLinear():
        ep = gp.export(model, (_batch(3, False),), dynamic_shapes=({0: Dim.DYNAMIC},))
        theirs = torch.export.export(model, (_batch(3, False),))
    for n in SIZES:
        x = _batch(n, False)
        with DoubleLinear():
            expected = model(x)
        torch.testing.assert_close(ep.module()(x), expected, rtol=0, atol=0)
    x = _batch(3, False)   # torch.export's program is static in the batch
    torch.testing.assert_close(ep.module()(x), theirs.module()(x))


@pytest.mark.parametrize("read", READS.values(), ids=READS.keys())
def test_a_read_inside_a_captured_branch_is_refused(read):
    class InsideCond(nn.Module):
        def forward(self, x):
            def double(t):
                y = t * 2
                return y * (2.0 if read(y) else 3.0)
            return torch.cond(x.sum() > 0, double, lambda t: t + 1, (x,))
    with pytest.raises(UnsupportedFeatureError, match="inside a torch.cond branch") as caught:
        gp.export(InsideCond(), (torch.ones(3, 4, requires_grad=True),))
    assert caught.value.location.filename == __file__


def test_a_read_before_the_branch_as_the_fix_says():
    class BeforeCond(nn.Module):
        def forward(self, x):
            y = x * 2
            factor = 2.0 if y.requires_grad else 3.0
            return torch.cond(x.sum() > 0, lambda t: t * factor, lambda t: t + 1, (y,))
    model = BeforeCond()
    for requires_grad in (True, False):
        x = torch.ones(3, 4, requires_grad=requires_grad)
        _agree(model, gp.export(model, (x,)), x)


def test_a_read_under_no_grad_at_export_is_reported_for_calls_with_grad():
    class Computed(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            y = self.lin(x)
            return y * (2.0 if y.requires_grad else 3.0)
    torch.manual_seed(0)
    model = Computed()
    x = _batch(3, False)
    with torch.no_grad():
        ep = gp.export(model, (x,))
        _agree(model, ep, x)
    (finding,) = [e for e in ep.python_effects if e.kind == BAKED and "requires_grad" in e.what]
    assert "= False" in finding.what and "y.requires_grad" in finding.location.code
    assert not torch.allclose(ep.module()(x), model(x))   # with grad on, eager takes the other branch
