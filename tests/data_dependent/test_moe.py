"""Mixture-of-experts models: transformers' Mixtral from a small config, its own routing
code unchanged, and the classic per-expert routing (`torch.where(expert_mask[i])`, whose
token counts are data-dependent), exported and matched against eager."""
from __future__ import annotations

import pytest
import torch
import transformers as tf

import graphport as gp


class _Logits(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(input_ids=ids, use_cache=False).logits


def _mixtral(experts_implementation: str | None = None) -> torch.nn.Module:
    torch.manual_seed(0)
    config = tf.MixtralConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                              num_experts_per_tok=2, max_position_embeddings=64,
                              experts_implementation=experts_implementation)
    return _Logits(tf.MixtralForCausalLM(config).eval())


class ClassicMoE(torch.nn.Module):
    """Top-2 routing as Mixtral's original implementation wrote it: per expert, the tokens
    routed to it are found with torch.where on the routing mask (a data-dependent count)."""

    def __init__(self, dim: int = 16, experts: int = 4):
        super().__init__()
        self.gate = torch.nn.Linear(dim, experts, bias=False)
        self.experts = torch.nn.ModuleList(torch.nn.Sequential(torch.nn.Linear(dim, 32), torch.nn.SiLU(),
                                                               torch.nn.Linear(32, dim)) for _ in range(experts))

    def forward(self, x):
        b, s, d = x.shape
        h = x.reshape(-1, d)
        weights, chosen = torch.topk(torch.softmax(self.gate(h), dim=-1), 2, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(h)
        mask = torch.nn.functional.one_hot(chosen, num_classes=len(self.experts)).permute(2, 1, 0)
        for i, expert in enumerate(self.experts):
            slot, token = torch.where(mask[i])
            out = out.index_add(0, token, expert(h[token]) * weights[token, slot, None])
        return out.reshape(b, s, d)


def _check(ep, model, inputs) -> None:
    for x in inputs:
        torch.testing.assert_close(ep.module()(x), model(x))


def test_mixtral_static() -> None:
    """transformers picks its grouped-mm experts by default: every expert runs on a static
    layout (its `grouped_mm_fallback` custom op), no data-dependent size."""
    model = _mixtral()
    assert model.model.config._experts_implementation == "grouped_mm"
    ids = torch.randint(0, 64, (2, 8))
    ep = gp.export(model, (ids,))
    assert any("grouped_mm" in str(n.target) for n in ep.graph.nodes)
    _check(ep, model, [ids, torch.randint(0, 64, (2, 8))])


def test_mixtral_eager_experts_loop_over_hit_experts_is_refused_with_the_line() -> None:
    """transformers' eager experts iterate `for expert_idx in expert_hit` over a nonzero
    result: a Python loop whose trip count is data (torch.export refuses it as well). The
    error names transformers' line and the data-dependent count."""
    model = _mixtral("eager")
    assert model.model.config._experts_implementation == "eager"
    with pytest.raises(gp.errors.DataDependentError) as info:
        gp.export(model, (torch.randint(0, 64, (2, 8)),))
    message = str(info.value)
    assert "modeling_mixtral.py" in message and "for expert_idx in expert_hit" in message
    assert "number of nonzero elements" in message and "torch._check(" in message


@pytest.mark.slow
def test_mixtral_dynamic_batch_and_sequence() -> None:
    model = _mixtral()
    ids = torch.randint(0, 64, (2, 8))
    ep = gp.export(model, (ids,), dynamic_shapes={"ids": {0: gp.Dim("batch", max=8), 1: gp.Dim("seq", max=32)}})
    _check(ep, model, [torch.randint(0, 64, shape) for shape in [(2, 8), (3, 5), (1, 12), (8, 32)]])


def test_classic_routing_static() -> None:
    torch.manual_seed(0)
    model = ClassicMoE().eval()
    x = torch.randn(2, 5, 16)
    ep = gp.export(model, (x,))
    assert any("u" in str(s) for s in ep.range_constraints)   # token counts are data-dependent symbols
    _check(ep, model, [x, torch.randn(2, 5, 16), torch.zeros(2, 5, 16)])


def test_classic_routing_dynamic_batch_and_sequence() -> None:
    torch.manual_seed(0)
    model = ClassicMoE().eval()
    x = torch.randn(2, 5, 16)
    ep = gp.export(model, (x,), dynamic_shapes={"x": {0: gp.Dim("batch", max=8), 1: gp.Dim("seq", max=64)}})
    _check(ep, model, [torch.randn(*shape, 16) for shape in [(2, 5), (3, 7), (1, 1), (8, 64)]])
