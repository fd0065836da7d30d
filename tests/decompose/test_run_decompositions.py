"""run_decompositions: tables as torch's (the documentation's examples), what carries over
(signature, mutations, shapes, metadata), the Core ATen dialect, and its refusals."""
from __future__ import annotations

import warnings
from collections import Counter

import pytest
import torch
from torch import nn

import graphport as gp

aten = torch.ops.aten


def operators(program) -> Counter:
    return Counter(str(n.target) for n in program.graph.nodes
                   if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload))


def torch_program(model, args, dynamic_shapes=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.export.export(model, args, dynamic_shapes=dynamic_shapes)


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.lin = nn.Linear(144, 5)

    def forward(self, img):
        return self.lin(torch.relu(self.conv(img)).flatten(1)).softmax(-1)


def my_conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    pair = (lambda v: [v, v] if isinstance(v, int) else list(v))
    return aten.convolution.default(x, weight, bias, pair(stride), pair(padding), pair(dilation), False, [0, 0],
                                    groups) * 2


def _tables(module):
    keep_conv = module.default_decompositions()
    del keep_conv[aten.conv2d.default]
    replace_conv = module.default_decompositions()
    replace_conv[aten.conv2d.default] = my_conv2d
    return {"core": None, "keep conv2d": keep_conv, "replace conv2d": replace_conv, "empty": {},
            "only conv2d": {aten.conv2d.default: my_conv2d}}


@pytest.fixture(scope="module")
def convnet_programs():
    """One ConvNet exported by both exporters (torch.export's export takes seconds)."""
    torch.manual_seed(0)
    model, img = ConvNet().eval(), torch.randn(2, 3, 8, 8)
    return model, gp.export(model, (img,)), torch_program(model, (img,))


@pytest.mark.parametrize("which", ["core", "keep conv2d", "replace conv2d", "empty", "only conv2d"])
def test_documented_tables_behave_as_in_torch(which, convnet_programs):
    model, ep, their_ep = convnet_programs
    ours = ep.run_decompositions(_tables(gp)[which])
    theirs = their_ep.run_decompositions(_tables(torch.export)[which])
    assert operators(ours) == operators(theirs)
    fresh = torch.randn(2, 3, 8, 8)
    torch.testing.assert_close(ours.module()(fresh), theirs.module()(fresh))
    expected = model(fresh) if which not in ("replace conv2d", "only conv2d") else None
    if expected is not None:
        torch.testing.assert_close(ours.module()(fresh), expected)


def test_default_decompositions_is_a_fresh_mutable_mapping():
    table = gp.default_decompositions()
    assert aten.conv2d.default in table and aten.linear.default in table
    assert aten.addcdiv.default in table                # a non-composite op torch lowers
    assert aten.addmm.default not in table              # a core op: nothing to lower
    del table[aten.conv2d.default]
    assert aten.conv2d.default not in table and aten.conv2d.default in gp.default_decompositions()
    table[aten.relu.default] = lambda x: torch.clamp(x, min=0)
    assert aten.relu.default in table
    assert set(gp.default_decompositions().materialize()) == set(torch.export.default_decompositions())


class Stateful(nn.Module):
    """Every mutation kind: BatchNorm's buffers in training, a counter buffer, a user input."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 8)
        self.bn = nn.BatchNorm1d(8)
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))

    def forward(self, x, acc):
        self.steps += 1
        y = self.bn(nn.functional.gelu(self.lin(x)))
        acc.add_(y.sum(0))
        return nn.functional.layer_norm(y, (8,)).view(y.shape[0] * 2, 4), y.shape[0]


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
def test_mutations_shapes_and_values_carry_over(train):
    torch.manual_seed(0)
    model = Stateful().train(train)
    batch = gp.Dim("batch", min=1, max=64)
    args = (torch.randn(3, 4), torch.zeros(8))
    ep = gp.export(model, (args[0], args[1].clone()), dynamic_shapes=({0: batch}, None))
    core = ep.run_decompositions()
    assert [(s.kind, s.target) for s in core.graph_signature.output_specs] == \
        [(s.kind, s.target) for s in ep.graph_signature.output_specs]
    assert {s.kind for s in core.graph_signature.output_specs} >= \
        {gp.OutputKind.BUFFER_MUTATION, gp.OutputKind.USER_INPUT_MUTATION, gp.OutputKind.USER_OUTPUT}
    assert core.range_constraints == ep.range_constraints
    gp.verify(core, dialect="core_aten")
    if train:   # torch.export's lowering keeps the functional batch norm and its buffer updates
        theirs = torch_program(Stateful().train(train), (args[0], args[1].clone()),
                               ({0: torch.export.Dim("batch", min=1, max=64)}, None)).run_decompositions()
        assert operators(core) == operators(theirs)
    for size in (3, 5, 2) if train else (3, 5, 1):   # eager batch norm refuses one sample in training
        eager = Stateful().train(train)
        eager.load_state_dict(model.state_dict())
        program = core.module()
        x, acc_ours, acc_eager = torch.randn(size, 4), torch.zeros(8), torch.zeros(8)
        expected = eager(x, acc_eager)
        got = program(x, acc_ours)
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(acc_ours, acc_eager)
        for name, buf in eager.named_buffers():
            torch.testing.assert_close(program.get_buffer(name), buf)
    with pytest.raises(gp.InputGuardError, match="outside the range"):
        core.module()(torch.randn(65, 4), torch.zeros(8))


def test_original_program_is_untouched():
    model, img = ConvNet().eval(), torch.randn(2, 3, 8, 8)
    ep = gp.export(model, (img,))
    before, graph_module = ep.graph_module.print_readable(print_output=False), ep.graph_module
    core = ep.run_decompositions()
    assert ep.graph_module is graph_module and ep.graph_module.print_readable(print_output=False) == before
    assert core.graph_module is not ep.graph_module
    assert "aten.conv2d.default" in operators(ep) and "aten.conv2d.default" not in operators(core)


def test_every_node_inherits_the_location_and_module_of_the_node_it_came_from():
    model, img = ConvNet().eval(), torch.randn(2, 3, 8, 8)
    ep = gp.export(model, (img,))
    core = ep.run_decompositions()
    calls = [n for n in core.graph.nodes if n.op == "call_function"]
    assert calls and all(n.meta.get("stack_trace") and "nn_module_stack" in n.meta for n in calls)
    linear = next(n for n in ep.graph.nodes if n.target is aten.linear.default)
    addmm = next(n for n in core.graph.nodes if n.target is aten.addmm.default)
    assert addmm.meta["stack_trace"] == linear.meta["stack_trace"]
    assert addmm.meta["nn_module_stack"] == linear.meta["nn_module_stack"]
    assert "L__self__lin" in addmm.meta["nn_module_stack"]


def test_dynamic_sizes_stay_symbolic_through_decompositions():
    model = nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.GELU())
    batch, seq = gp.dims("batch", "seq", max=128)
    x = torch.randn(3, 5, 4)
    ep = gp.export(model, (x,), dynamic_shapes={"input": {0: batch, 1: seq}})
    core = ep.run_decompositions()
    out = next(n for n in core.graph.nodes if n.op == "output").args[0][0]
    assert all(isinstance(s, torch.SymInt) for s in out.meta["val"].shape[:2])
    for shape in [(3, 5, 4), (1, 1, 4), (7, 2, 4), (2, 0, 4)]:
        x = torch.randn(shape)
        torch.testing.assert_close(core.module()(x), model(x))


def test_a_decomposition_that_needs_a_new_shape_fact_is_refused():
    def picky_gelu(x, approximate="none"):
        if x.shape[0] > 4:      # a guard the program was not exported with
            return x * 0.5 * (1 + torch.erf(x / 2 ** 0.5))
        return x * 0.5 * (1 + torch.erf(x * 0.7071067811865476))

    ep = gp.export(nn.GELU(), (torch.randn(3, 4),), dynamic_shapes={"input": {0: gp.Dim("batch")}})
    with pytest.raises(gp.UnsupportedFeatureError, match="needs the sizes to satisfy") as info:
        ep.run_decompositions({aten.gelu.default: picky_gelu})
    assert "del table[op]" in str(info.value) and "test_run_decompositions.py" in str(info.value)
    assert isinstance(info.value, RuntimeError)
    ep.run_decompositions({})   # the failed attempt left the program's shape facts as they were
    assert len(ep.run_decompositions().graph.nodes) > 0


def test_core_aten_dialect_rejects_a_non_core_operator():
    model, img = ConvNet().eval(), torch.randn(2, 3, 8, 8)
    ep = gp.export(model, (img,))
    gp.verify(ep)
    with pytest.raises(gp.InternalError, match="Core ATen dialect"):
        gp.verify(ep, dialect="core_aten")   # conv2d and linear are not Core ATen
    gp.verify(ep.run_decompositions(), dialect="core_aten")
    with pytest.raises(ValueError, match="unknown dialect"):
        gp.verify(ep, dialect="edge")


def test_composites_that_alias_still_expand_under_an_empty_table():
    def f(x):
        return x.reshape(-1, 2).t().contiguous() + 1

    ep = gp.export(f, (torch.randn(4, 3),))
    same = ep.run_decompositions({})
    assert operators(same) == operators(ep)
    x = torch.randn(4, 3)
    torch.testing.assert_close(same.module()(x), f(x))


def test_lowering_an_lstm_does_not_depend_on_the_cpu_backend():
    model = nn.LSTM(4, 8, batch_first=True).eval()
    x = torch.randn(2, 3, 4)
    core = gp.export(model, (x,)).run_decompositions()
    assert not any("mkldnn" in op for op in operators(core))
    torch.testing.assert_close(core.module()(x), model(x))
    assert torch.backends.mkldnn.is_available() is False or torch._C._get_mkldnn_enabled()


class PoolOverTokens(nn.Module):
    """Swin's pooler: average over a transposed sequence. adaptive_avg_pool2d's composite
    kernel restrides its fresh channels-last result in place (`as_strided_`)."""

    def forward(self, x):
        return nn.functional.adaptive_avg_pool1d((x * 2).transpose(1, 2), 1).flatten(1) + 1


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_a_composite_that_restrides_its_own_result_lowers_as_in_torch(dynamic):
    x = torch.randn(2, 6, 4)
    ep = gp.export(PoolOverTokens(), (x,), dynamic_shapes=({0: gp.Dim("b")},) if dynamic else None)
    core = ep.run_decompositions()
    gp.verify(core, dialect="core_aten")
    theirs = torch_program(PoolOverTokens(), (x,), ({0: torch.export.Dim("b")},) if dynamic else None)
    assert operators(core) == operators(theirs.run_decompositions())
    assert "aten.as_strided.default" in operators(core)
    for batch in (2, 1, 5, 0) if dynamic else (2,):
        fresh = torch.randn(batch, 6, 4)
        torch.testing.assert_close(core.module()(fresh), PoolOverTokens()(fresh))


def test_restriding_an_input_in_place_is_still_refused():
    def f(x):
        x.as_strided_((2, 2), (1, 2))
        return x + 1

    with pytest.raises(gp.UnsupportedFeatureError, match="changes a tensor's shape or strides in place") as info:
        gp.export(f, (torch.randn(2, 2),))
    assert isinstance(info.value, RuntimeError) and "test_run_decompositions.py" in str(info.value)


class ScaledByItsSum(nn.Module):
    def forward(self, x):
        return x * x.sum().item()


@pytest.mark.parametrize("which", ["core", "empty"])
def test_item_lowers_to_local_scalar_dense_and_stays_under_an_empty_table(which):
    x = torch.randn(3)
    table = None if which == "core" else {}
    ours = gp.export(ScaledByItsSum(), (x,)).run_decompositions(table)
    theirs = torch_program(ScaledByItsSum(), (x,)).run_decompositions(table)
    kept = {"aten.item.default", "aten._local_scalar_dense.default"}
    assert {op for op in operators(ours) if op in kept} == {op for op in operators(theirs) if op in kept} == \
        {"aten._local_scalar_dense.default" if which == "core" else "aten.item.default"}
    fresh = torch.randn(3)
    torch.testing.assert_close(ours.module()(fresh), ScaledByItsSum()(fresh))


def test_lowering_a_cond_lifts_no_constants_from_its_branches():
    def f(x, y):
        return torch.cond(x.shape[0] > 2, lambda a, b: a + b, lambda a, b: a - b, (x, y))

    x, y = torch.randn(3, 2), torch.randn(3, 2)
    ep = gp.export(f, (x, y), dynamic_shapes=({0: gp.Dim("n")}, {0: gp.Dim("n")}))
    core = ep.run_decompositions()
    assert core.graph_signature.input_specs == ep.graph_signature.input_specs
    assert [n.name for n in core.graph.nodes if n.op == "placeholder"] == ["x", "y"]
    for n in (3, 2):
        a, b = torch.randn(n, 2), torch.randn(n, 2)
        torch.testing.assert_close(core.module()(a, b), f(a, b))
