"""Small sizes proven operator by operator (capture/local_proofs.py): an assumption made
while one operator's metadata is worked out is proven by working it out again at the small
size, not by tracing the program again; anything else falls back to the re-trace. Either
way the program answers as eager does at every size it accepts."""
import importlib

import pytest
import torch

import graphport as gp
from graphport.shapes.node import SymNode

export_module = importlib.import_module("graphport.export")   # the module, not gp.export the function

N = gp.Dim("n", min=0, max=8)


@pytest.fixture
def retraces(monkeypatch):
    """How many pinned re-traces each export made."""
    counts = []
    prove = export_module.prove_small_sizes

    def counting(*args, **kwargs):
        report = prove(*args, **kwargs)
        counts.append(report.traces)
        return report
    monkeypatch.setattr(export_module, "prove_small_sizes", counting)
    return counts


def _env(ep):
    """The shape environment behind the program's sizes."""
    for node in ep.graph.nodes:
        val = node.meta.get("val")
        for size in (*val.shape, *val.stride()) if isinstance(val, torch.Tensor) else ():
            if isinstance(getattr(size, "node", None), SymNode):
                return size.node.env
    raise AssertionError("no symbolic size in the program")


def _matches_eager_or_refuses(ep, fn, make, sizes):
    ran = []
    for n in sizes:
        inputs = make(n)
        expected = fn(*[t.clone() for t in inputs])
        try:
            got = ep.module()(*[t.clone() for t in inputs])
        except gp.InputMismatchError:
            continue
        torch.testing.assert_close(got, expected)
        ran.append(n)
    return ran


class Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(8, 24)
        self.out = torch.nn.Linear(8, 8)

    def forward(self, x, mask):
        b, s, _ = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, 2, 4).permute(2, 0, 3, 1, 4)
        # expand's Python reference asks whether each size is 1 (an assumption made inside one
        # operator's metadata, which the local proof settles)
        att = (q @ k.transpose(-1, -2)) / 2.0 + mask[:, None, None, :].expand(b, 2, s, s)
        y = att.softmax(-1) @ v
        return self.out(y.transpose(1, 2).reshape(b, s, 8))


def test_a_layer_whose_assumptions_are_all_metadata_is_proven_without_a_retrace(retraces):
    model = Attention().eval()
    batch = gp.Dim("batch", min=1, max=8)
    ep = gp.export(model, (torch.randn(3, 5, 8), torch.zeros(3, 5)),
                   dynamic_shapes=({0: batch}, {0: batch}))
    assert retraces == [0]
    symbol = next(iter(_env(ep).proven_min))
    assert _env(ep).proven_min[symbol] == 2 and not _env(ep).assumed_min
    ran = _matches_eager_or_refuses(ep, model, lambda b: (torch.randn(b, 5, 8), torch.randn(b, 5)), [1, 2, 3, 8])
    assert ran == [1, 2, 3, 8]


def test_contiguous_then_written_in_place_is_left_to_the_retrace_which_finds_the_alias(retraces):
    def f(x):
        y = x.transpose(0, 1).contiguous()   # a copy at n >= 2; at n = 1 x itself, viewed
        y.mul_(2)                             # so at n = 1 this writes into x too
        return x + 1, y
    with pytest.raises(gp.ConstraintViolationError, match="n = 1"):
        gp.export(f, (torch.randn(4, 3),), dynamic_shapes=({1: gp.Dim("n", min=1, max=8)},))
    assert retraces and retraces[0] >= 1
    ep = gp.export(f, (torch.randn(4, 3),), dynamic_shapes=({1: gp.Dim("n", min=2, max=8)},))
    assert _matches_eager_or_refuses(ep, f, lambda n: (torch.randn(4, n),), [2, 5]) == [2, 5]


def test_contiguous_never_written_needs_no_retrace(retraces):
    def f(x):
        return x.transpose(0, 1).contiguous().sum(0)
    ep = gp.export(f, (torch.randn(4, 3),), dynamic_shapes=({1: gp.Dim("n", min=1, max=8)},))
    assert retraces == [0]
    assert _matches_eager_or_refuses(ep, f, lambda n: (torch.randn(4, n),), [1, 2, 5]) == [1, 2, 5]


def test_a_view_whose_shape_differs_at_size_one_fails_the_proof_and_is_not_answered_wrong(retraces):
    def f(x):
        return x.squeeze() * 2   # drops the dynamic dim at n = 1
    try:
        ep = gp.export(f, (torch.randn(4, 3),), dynamic_shapes=({0: gp.Dim("n", min=1, max=8)},))
    except gp.ConstraintViolationError:
        return
    assert retraces and retraces[0] >= 1
    assert {2, 5} <= set(_matches_eager_or_refuses(ep, f, lambda n: (torch.randn(n, 3),), [1, 2, 5]))


def test_reading_strides_falls_back_to_the_retrace(retraces):
    def f(x):
        y = x.expand(x.shape[0], 4, x.shape[2])
        return y * y.stride(1)
    ep = gp.export(f, (torch.randn(3, 1, 5),), dynamic_shapes=({0: N},))
    assert _matches_eager_or_refuses(ep, f, lambda n: (torch.randn(n, 1, 5),), [0, 1, 2, 3])


def test_the_proven_sizes_survive_save_and_load(tmp_path):
    model = Attention().eval()
    batch = gp.Dim("batch", min=1, max=8)
    ep = gp.export(model, (torch.randn(3, 5, 8), torch.zeros(3, 5)), dynamic_shapes=({0: batch}, {0: batch}))
    gp.save(ep, tmp_path / "p.gport")
    loaded = gp.load(tmp_path / "p.gport")
    assert {s.name: v for s, v in _env(loaded).proven_min.items()} == \
        {s.name: v for s, v in _env(ep).proven_min.items()}
    x, mask = torch.randn(1, 5, 8), torch.randn(1, 5)
    torch.testing.assert_close(loaded.module()(x, mask), model(x, mask))


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("cls", [torch.nn.GRU, torch.nn.LSTM])
def test_recurrent_layers_export_dynamic_batch_in_closed_form(retraces, cls, batch_first):
    model = cls(6, 5, num_layers=2, batch_first=batch_first).eval()
    shape = (lambda b: (b, 7, 6)) if batch_first else (lambda b: (7, b, 6))
    ep = gp.export(model, (torch.randn(*shape(3)),), dynamic_shapes=({0 if batch_first else 1: gp.Dim("b", min=1, max=16)},))
    assert retraces == [0]
    for b in (1, 2, 16):
        x = torch.randn(*shape(b))
        torch.testing.assert_close(ep.module()(x), model(x))
