"""to_torch gives torch.export 2.13's default IR: dialect TRAINING and the operators torch.export
keeps there (`batch_norm`, `flatten.using_ints`) where graphport's functional level spells them
`_native_batch_norm_legit_no_training` + `getitem` and `sym_size` + `view`. The rewritten program
computes what eager does at every size inside its ranges, sizes 0 and 1 included."""
from __future__ import annotations

import collections
import io

import pytest
import torch
import torch.nn as nn

import graphport as gp
from graphport.interop import from_torch, to_torch


class ConvBnFlatten(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.head = nn.Linear(4 * 5 * 5, 2)

    def forward(self, x):
        return self.head(torch.relu(self.bn(self.conv(x))).flatten(1))


def _ops(program) -> collections.Counter:
    return collections.Counter(str(n.target) for n in program.graph.nodes if n.op == "call_function")


def _trained_bn(model: nn.Module) -> nn.Module:
    """Running statistics other than the defaults, so that eval BatchNorm is not the identity."""
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-1, 1)
            m.running_var.uniform_(0.5, 2)
    return model.eval()


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_operators_and_dialect_are_torch_exports(dynamic):
    model = _trained_bn(ConvBnFlatten())
    x = torch.randn(2, 3, 5, 5)
    tep = to_torch(gp.export(model, (x,), dynamic_shapes=({0: gp.Dim("b", min=0, max=8)},) if dynamic else None))
    theirs = torch.export.export(model, (x,), dynamic_shapes=({0: torch.export.Dim("b", max=8)},) if dynamic else None)
    assert tep.dialect == theirs.dialect == "TRAINING"
    assert _ops(tep) == _ops(theirs)
    assert not any("source_fn_stack" in n.meta for n in tep.graph.nodes)
    sizes = [0, 1, 2, 7] if dynamic else [2]
    for b in sizes:
        x = torch.randn(b, 3, 5, 5)
        with torch.no_grad():
            torch.testing.assert_close(tep.module()(x), model(x))


@pytest.mark.parametrize("start,end", [(0, -1), (1, -1), (1, 2), (2, 3), (0, 1)])
def test_flatten_of_any_run_of_dimensions_computes_like_eager(start, end):
    def f(x):
        return (x * 2).flatten(start, end) + 1

    x = torch.randn(3, 4, 2, 5)
    spec = ({0: gp.Dim("a", min=0, max=16), 2: gp.Dim("c", min=0, max=16)},)
    tep = to_torch(gp.export(f, (x,), dynamic_shapes=spec))
    assert _ops(tep)["aten.flatten.using_ints"] == 1 and not _ops(tep)["aten.view.default"]
    for a, c in [(3, 2), (0, 2), (1, 1), (5, 0), (2, 9)]:
        x = torch.randn(a, 4, c, 5)
        torch.testing.assert_close(tep.module()(x), f(x))


def test_batch_norm_whose_statistics_are_read_is_left_as_it_is():
    """Training-mode BatchNorm returns and updates its statistics: nothing to respell."""
    model = nn.BatchNorm1d(3).train()
    tep = to_torch(gp.export(model, (torch.randn(4, 3),)))
    assert not _ops(tep)["aten.batch_norm.default"]
    x = torch.randn(4, 3)
    expected = nn.BatchNorm1d(3).train()(x)
    torch.testing.assert_close(tep.module()(x), expected)


def test_aten_dialect_keeps_graphports_functional_operators():
    model = _trained_bn(ConvBnFlatten())
    ep = gp.export(model, (torch.randn(2, 3, 5, 5),), dynamic_shapes=({0: gp.Dim("b", max=8)},))
    tep = to_torch(ep, dialect="ATEN")
    assert tep.dialect == "ATEN"
    assert _ops(tep)["aten._native_batch_norm_legit_no_training.default"] == 1
    assert str(from_torch(tep)) == str(ep)


def test_training_round_trip_runs_like_eager_with_the_same_contract():
    model = _trained_bn(ConvBnFlatten())
    ep = gp.export(model, (torch.randn(2, 3, 5, 5),), dynamic_shapes=({0: gp.Dim("b", min=1, max=8)},))
    back = from_torch(to_torch(ep))
    assert back.shape_contract == ep.shape_contract
    for b in (1, 6):
        x = torch.randn(b, 3, 5, 5)
        with torch.no_grad():
            torch.testing.assert_close(back.module()(x), model(x))


def test_unknown_dialect_is_refused():
    ep = gp.export(nn.Linear(2, 2), (torch.randn(1, 2),))
    with pytest.raises(ValueError, match="TRAINING"):
        to_torch(ep, dialect="EDGE")


@pytest.mark.parametrize("model,shape", [
    (nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.3)), (2, 3)),
    (nn.BatchNorm1d(3), (2, 3)),
    (nn.Flatten(), (2, 3, 2)),
], ids=["dropout", "batch_norm", "flatten"])
def test_a_respelled_node_that_is_the_output_keeps_the_name_the_signature_gives(model, shape):
    model = model.eval()
    tep = to_torch(gp.export(model, (torch.randn(shape),), dynamic_shapes=({0: gp.Dim("b", min=0)},)))
    assert "aten.clone.default" not in _ops(tep) and "aten.view.default" not in _ops(tep)
    buffer = io.BytesIO()
    torch.export.save(tep, buffer)
    buffer.seek(0)
    programs = [tep.module(), torch.export.load(buffer).module(), from_torch(tep).module()]
    for b in (0, 1, 5):
        x = torch.randn(b, *shape[1:])
        for module in programs:
            torch.testing.assert_close(module(x), model(x))


class _SelfAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(16, 2, batch_first=True)

    def forward(self, x):
        return self.attn(x, x, x, need_weights=False)[0]


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_multihead_attentions_packed_projection_is_unflatten_as_torch_keeps_it(dynamic):
    """Only the view that splits the packed q/k/v projection's last dim becomes `unflatten`;
    the head reshapes stay views, as in torch.export's program."""
    model, x = _SelfAttention().eval(), torch.randn(2, 5, 16)
    spec = ({0: gp.Dim("b", min=0, max=8)},) if dynamic else None
    tep = to_torch(gp.export(model, (x,), dynamic_shapes=spec))
    theirs = torch.export.export(model, (x,), dynamic_shapes=({0: torch.export.Dim("b", max=8)},) if dynamic else None)
    assert _ops(tep)["aten.unflatten.int"] == _ops(theirs)["aten.unflatten.int"] == 1
    assert _ops(tep)["aten.view.default"] >= 1
    for b in [0, 1, 2, 7] if dynamic else [2]:
        x = torch.randn(b, 5, 16)
        with torch.no_grad():
            torch.testing.assert_close(tep.module()(x), model(x))
