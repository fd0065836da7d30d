"""Attention in `ep.module()` with grad enabled: CPU attention takes another kernel (with
another output layout) when its mask requires grad, as a relative position bias computed
from a parameter does in training. The program must follow eager's choice, so outputs and
every parameter's gradient match eager; programs whose mask does not require grad keep
torch.export's operators (tests/capture/test_differential.py compares those multisets)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import graphport as gp


class BiasedAttention(torch.nn.Module):
    """T5-style: the additive mask is a learned bias per head, so it requires grad."""

    def __init__(self, heads: int = 4, dim: int = 32, length: int = 8):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.bias = torch.nn.Parameter(torch.randn(heads, length, length))
        self.out = torch.nn.Linear(dim, dim)

    def forward(self, x, mask):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attn_mask = self.bias[:, :n, :n] + mask
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        return self.out(y.transpose(1, 2).contiguous().view(b, n, d))


def _inputs(batch: int = 2, n: int = 8):
    return torch.randn(batch, n, 32), torch.zeros(batch, 1, n, n)


def _grads(module) -> dict[str, torch.Tensor]:
    return {name: p.grad.clone() for name, p in module.named_parameters() if p.grad is not None}


def _compare_with_grad(model, ep, args, kwargs=None, pick=lambda out: out):
    kwargs = kwargs or {}
    module = ep.module()
    got, want = pick(module(*args, **kwargs)), pick(model(*args, **kwargs))
    torch.testing.assert_close(got, want)
    got.square().sum().backward()
    want.square().sum().backward()
    ours, theirs = _grads(module), _grads(model)
    assert ours.keys() == theirs.keys() and ours
    for name in theirs:
        torch.testing.assert_close(ours[name], theirs[name], msg=name)


@pytest.mark.parametrize("grad_at_export", [True, False])
def test_learned_mask_runs_in_both_grad_modes(grad_at_export):
    model = BiasedAttention()
    x, mask = _inputs()
    with torch.set_grad_enabled(grad_at_export):
        ep = gp.export(model, (x, mask))
    with torch.no_grad():
        torch.testing.assert_close(ep.module()(x, mask), model(x, mask))
    if grad_at_export:
        _compare_with_grad(model, ep, (x, mask))
    else:   # the fused kernel's layout was captured: with grad, eager takes the math kernel (as torch.export)
        with pytest.raises(RuntimeError, match="view size"):
            ep.module()(x, mask)


def test_dynamic_program_with_learned_mask_under_grad():
    model = BiasedAttention()
    b, n = gp.Dim("b"), gp.Dim("n", max=8)
    ep = gp.export(model, _inputs(), dynamic_shapes={"x": {0: b, 1: n}, "mask": {0: b, 2: n, 3: n}})
    for batch, n in [(3, 5), (1, 8), (2, 2)]:
        model.zero_grad()
        _compare_with_grad(model, ep, _inputs(batch, n))


def test_mask_without_grad_keeps_the_fused_layout():
    """A mask that does not require grad: no copy is added after attention."""
    class Plain(BiasedAttention):
        def forward(self, x, mask):
            b, n, d = x.shape
            q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            return self.out(y.transpose(1, 2).contiguous().view(b, n, d))
    model = Plain()
    ep = gp.export(model, _inputs())
    targets = [n.target for n in ep.graph.nodes if n.op == "call_function"]
    assert torch.ops.aten.clone.default not in targets
    _compare_with_grad(model, ep, _inputs())


@pytest.mark.slow
@pytest.mark.parametrize("name", ["t5", "swin"])
def test_zoo_attention_models_under_grad(name):
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from bench import zoo
    built = getattr(zoo, name)()
    args, kwargs = built.example_inputs()
    ep = gp.export(built.module, args, kwargs)
    _compare_with_grad(built.module, ep, args, kwargs, pick=lambda out: out.last_hidden_state)
