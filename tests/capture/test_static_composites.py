"""A static capture's shortcuts give the metadata the plain computations give.

capture/static_composites.py follows a kept composite's decomposition without recording its
insides, and capture/static_meta.py gives some operators' metadata in closed form, in a static
capture only. Each program here is exported twice, with those paths and with both switched
off (every kept composite's metadata then comes from the capture mode's decomposition, and
every operator's from torch's meta kernel): the printed programs and every node's metadata
(shape, strides, storage offset, dtype, device, requires_grad, which values share storage)
must be identical. The odd layouts (transposed, expanded, sliced, size-0 and size-1
dimensions, channels-last, inputs that require grad) are where kernels choose differently;
the programs also run against eager.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import graphport as gp
from graphport.capture import mode, static_composites

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # bench/ lives at the repo root


def _printed(ep) -> list:
    """The program as text, and each node's metadata, storage sharing as the first node whose
    value shares it."""
    out = [str(ep)]
    storages: dict = {}
    for node in ep.graph.nodes:
        val = node.meta.get("val")
        vals = val if isinstance(val, (list, tuple)) else [val]
        described = []
        for v in vals:
            if isinstance(v, torch.Tensor):
                storage = storages.setdefault(v.untyped_storage()._cdata, node.name)
                described.append((str(v.shape), v.stride(), v.storage_offset(), v.dtype, str(v.device),
                                  v.requires_grad, storage))
            else:
                described.append(repr(v))
        out.append((node.name, node.meta.get("stack_trace"), described))
    return out


class _Followed:
    """Counts the kept composites whose metadata the static path gave."""

    def __init__(self, monkeypatch):
        self.names: list[str] = []
        plain = static_composites.composite_metadata

        def counted(func, *args, **kwargs):
            out = plain(func, *args, **kwargs)
            self.names.append(func.name())
            return out
        monkeypatch.setattr(static_composites, "composite_metadata", counted)


def _both(monkeypatch, export) -> tuple[list, list, list[str]]:
    """(fast program, plain program, composites the fast path answered)."""
    followed = _Followed(monkeypatch)
    fast = export()
    with monkeypatch.context() as patch:
        patch.setattr(static_composites, "static_capture", lambda rec: False)
        patch.setattr(mode, "static_meta", lambda func, args, kwargs: None)
        plain = export()
    return fast, plain, followed.names


@pytest.mark.parametrize("name", ["bert", "llama", "t5", "vit", "resnet50",
                                  pytest.param("gpt2", marks=pytest.mark.slow)])
def test_zoo_programs_unchanged(name, monkeypatch):
    from bench import zoo

    built = zoo.MODELS[name].build()
    args, kwargs = built.example_inputs()
    fast, plain, followed = _both(monkeypatch, lambda: _printed(gp.export(built.module, args, kwargs)))
    assert fast == plain
    assert followed   # the path ran


class Calls(torch.nn.Module):
    """One kept composite called on the given inputs (parameters, where it has them, made by `setup`)."""

    def __init__(self, call, setup=None):
        super().__init__()
        self.call = call
        if setup is not None:
            setup(self)

    def forward(self, *xs):
        return self.call(self, *xs)


def _linear(with_bias=True, out=6, inp=4):
    def setup(m):
        m.lin = torch.nn.Linear(inp, out, bias=with_bias)
    return setup


def _t(*shape):
    return torch.randn(*shape)


# (name, call, setup, inputs): each input in an odd layout somewhere
CASES = [
    ("linear_2d", lambda m, x: m.lin(x), _linear(), (_t(3, 4),)),
    ("linear_1d", lambda m, x: m.lin(x), _linear(), (_t(4),)),
    ("linear_3d_transposed", lambda m, x: m.lin(x), _linear(), (_t(4, 5, 3).transpose(0, 2),)),
    ("linear_4d_no_bias", lambda m, x: m.lin(x), _linear(False), (_t(2, 3, 5, 4),)),
    ("linear_sliced", lambda m, x: m.lin(x), _linear(), (_t(3, 7, 9)[1:, 2:6, 3:7],)),
    ("linear_expanded", lambda m, x: m.lin(x), _linear(), (_t(1, 5, 4).expand(3, 5, 4),)),
    ("linear_size0", lambda m, x: m.lin(x), _linear(), (_t(0, 5, 4),)),
    ("linear_size1", lambda m, x: m.lin(x), _linear(), (_t(1, 1, 4),)),
    ("linear_size1_transposed", lambda m, x: m.lin(x), _linear(False), (_t(4, 1, 2).permute(2, 1, 0),)),
    ("linear_requires_grad_input", lambda m, x: m.lin(x), _linear(), (_t(2, 5, 4).requires_grad_(),)),
    ("matmul_vec_vec", lambda m, a, b: a @ b, None, (_t(5), _t(5))),
    ("matmul_mat_vec", lambda m, a, b: a @ b, None, (_t(3, 5).t(), _t(3))),
    ("matmul_3d_2d_transposed", lambda m, a, b: a @ b, None, (_t(2, 4, 3).transpose(1, 2), _t(5, 4).t())),
    ("matmul_broadcast", lambda m, a, b: a @ b, None, (_t(2, 1, 3, 4), _t(5, 4, 6))),
    ("matmul_1d_3d", lambda m, a, b: a @ b, None, (_t(4), _t(2, 4, 3))),
    ("matmul_size1", lambda m, a, b: a @ b, None, (_t(1, 1, 4), _t(4, 1))),
    ("matmul_size0", lambda m, a, b: a @ b, None, (_t(2, 0, 4), _t(4, 3))),
    ("matmul_grad", lambda m, a, b: a @ b, None, (_t(2, 3, 4), _t(4, 5).requires_grad_())),
    ("layer_norm_transposed", lambda m, x: F.layer_norm(x, (3,)), None, (_t(3, 4).t(),)),
    ("layer_norm_expanded", lambda m, x: F.layer_norm(x, (4,)), None, (_t(1, 4).expand(3, 4),)),
    ("layer_norm_size1", lambda m, x: F.layer_norm(x, (1,)), None, (_t(2, 1, 1),)),
    ("group_norm_channels_last", lambda m, x: F.group_norm(x, 2), None,
     (_t(2, 4, 3, 3).to(memory_format=torch.channels_last),)),
    ("conv2d_channels_last", lambda m, x: m.conv(x), lambda m: setattr(m, "conv", torch.nn.Conv2d(3, 4, 3)),
     (_t(2, 3, 8, 8).to(memory_format=torch.channels_last),)),
    ("conv2d_unbatched", lambda m, x: m.conv(x), lambda m: setattr(m, "conv", torch.nn.Conv2d(3, 4, 3, padding=1)),
     (_t(3, 5, 5),)),
    ("conv1d_size1", lambda m, x: m.conv(x), lambda m: setattr(m, "conv", torch.nn.Conv1d(2, 3, 1)), (_t(1, 2, 1),)),
    ("sdpa_transposed", lambda m, q, k, v: F.scaled_dot_product_attention(q, k, v), None,
     (_t(2, 5, 3, 4).transpose(1, 2), _t(2, 5, 3, 4).transpose(1, 2), _t(2, 5, 3, 4).transpose(1, 2))),
    ("sdpa_mask_requires_grad", lambda m, q, k, v, mask: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
     None, (_t(1, 2, 3, 4), _t(1, 2, 3, 4), _t(1, 2, 3, 4), _t(1, 1, 3, 3).requires_grad_())),
    ("sdpa_causal_seq1", lambda m, q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), None,
     (_t(2, 2, 1, 4), _t(2, 2, 1, 4), _t(2, 2, 1, 4))),
    ("sdpa_expanded_mask", lambda m, q, k, v, mask: F.scaled_dot_product_attention(q, k, v, attn_mask=mask), None,
     (_t(2, 2, 3, 4), _t(2, 2, 3, 4), _t(2, 2, 3, 4), torch.ones(1, 1, 1, 3, dtype=torch.bool).expand(2, 2, 3, 3))),
    ("where_scalar_self", lambda m, c, x: torch.where(c, 0.5, x), None,
     (torch.rand(4, 3) > 0.5, _t(3, 4).t())),
    ("where_scalar_other_int", lambda m, c, x: torch.where(c, x, 2), None,
     (torch.rand(1, 3) > 0.5, torch.arange(6).reshape(2, 3))),
    ("and_expanded", lambda m, a, b: a & b, None,
     (torch.ones(1, 4, dtype=torch.bool).expand(3, 4), torch.rand(3, 1) > 0.5)),
    ("min_other_transposed", lambda m, a, b: torch.min(a, b), None, (_t(4, 3).t(), _t(3, 4))),
    ("adaptive_avg_pool_channels_last", lambda m, x: F.adaptive_avg_pool2d(x, 1), None,
     (_t(2, 3, 4, 4).to(memory_format=torch.channels_last),)),
    ("max_pool_sliced", lambda m, x: F.max_pool2d(x, 2), None, (_t(2, 3, 6, 6)[:, :, 1:5, 1:5],)),
    ("softmax_half", lambda m, x: torch.softmax(x, -1, dtype=torch.float32), None, (_t(3, 4).half().t(),)),
    ("cosine_similarity", lambda m, a, b: F.cosine_similarity(a, b), None, (_t(3, 4), _t(1, 4))),
    ("rms_norm_transposed", lambda m, x: F.rms_norm(x, (3,)), None, (_t(3, 4).t(),)),
    ("cross_entropy", lambda m, x, y: F.cross_entropy(x, y), None, (_t(3, 5), torch.tensor([0, 4, 2]))),
    ("bilinear", lambda m, a, b: m.bil(a, b), lambda m: setattr(m, "bil", torch.nn.Bilinear(3, 4, 2)),
     (_t(5, 3), _t(4, 5).t())),
    ("pad_channels_last", lambda m, x: F.pad(x, (1, 1, 2, 0)), None,
     (_t(2, 3, 4, 4).to(memory_format=torch.channels_last),)),
    ("embedding_bag_like", lambda m, x: F.normalize(x, dim=0), None, (_t(4, 3).t()[:, 1:],)),
]


@pytest.mark.parametrize("name,call,setup,inputs", CASES, ids=[c[0] for c in CASES])
def test_odd_layouts_unchanged_and_eager(name, call, setup, inputs, monkeypatch):
    torch.manual_seed(0)
    model = Calls(call, setup)
    eps = []

    def export():
        eps.append(gp.export(model, inputs))
        return _printed(eps[-1])

    fast, plain, _ = _both(monkeypatch, export)
    assert fast == plain
    expected = model(*inputs)
    got = eps[0].module()(*inputs)
    torch.testing.assert_close(got, expected)
    assert got.shape == expected.shape and got.stride() == expected.stride()


def test_path_answers_the_common_layers(monkeypatch):
    """The path is taken for the layers that dominate capture (not refused everywhere)."""
    model = Calls(lambda m, x: F.layer_norm(m.lin(x), (6,)) @ torch.ones(6, 2), _linear())
    fast, plain, followed = _both(monkeypatch, lambda: _printed(gp.export(model, (_t(2, 3, 4),))))
    assert fast == plain
    assert {"aten::linear", "aten::layer_norm", "aten::matmul"} <= set(followed)


def test_dynamic_capture_takes_the_plain_path(monkeypatch):
    followed = _Followed(monkeypatch)
    model = Calls(lambda m, x: m.lin(x), _linear())
    batch = gp.Dim("batch", min=2)
    gp.export(model, (_t(3, 4),), dynamic_shapes=({0: batch},))
    assert followed.names == []


def test_error_in_a_kept_composite_is_the_plain_paths():
    """A call eager rejects: the static path declines, and the error is the capture mode's."""
    model = Calls(lambda m, x: m.lin(x), _linear())
    with pytest.raises(gp.errors.OperatorError, match="linear"):
        gp.export(model, (_t(3, 5),))
