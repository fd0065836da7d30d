"""Decoding with a StaticCache held by the module (transformers' export recipe): the cache's
preallocated tensors are buffers the program writes in place, so they become
BUFFER_MUTATION outputs and ep.module() updates its buffers on every call, as eager does.

(torch.export lifts these tensors as constants and keeps the in-place writes in its graph;
graphport's graph stays functional, so the comparison with torch is on the logits only.)
"""
from __future__ import annotations

import pytest
import torch
from transformers.integrations.executorch import TorchExportableModuleWithStaticCache

import graphport as gp
from graphport.interop import to_torch

from .cases import VOCAB, build, layers

MAX_CACHE = 16


def wrapped(name: str) -> torch.nn.Module:
    model = build(name)
    model.generation_config.cache_implementation = "static"
    return TorchExportableModuleWithStaticCache(model, batch_size=2, max_cache_len=MAX_CACHE)


def step_kwargs(token: torch.Tensor, position: int) -> dict:
    return {"input_ids": token, "cache_position": torch.tensor([position])}


def export_static(name: str, export=gp.export):
    module = wrapped(name)
    with torch.no_grad():
        return export(module, (), step_kwargs(torch.randint(0, VOCAB, (2, 1)), 0))


def assert_decodes_like_eager(name: str, run) -> None:
    """`run` is the program's module; a fresh wrapper (empty cache) is the reference."""
    reference = wrapped(name)
    prompt = torch.randint(0, VOCAB, (2, 10))
    with torch.no_grad():
        for position in range(prompt.shape[1]):
            token = prompt[:, position:position + 1]
            expected = reference(**step_kwargs(token, position))
            got = run(**step_kwargs(token, position))
            torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5, msg=lambda m: f"position {position}: {m}")


@pytest.fixture(scope="module")
def llama_static():
    return export_static("llama")


def test_cache_writes_are_buffer_mutations(llama_static):
    mutated = [s.target for s in llama_static.graph_signature.output_specs if s.kind is gp.OutputKind.BUFFER_MUTATION]
    assert mutated == [f"{kind}_{i}" for i in range(layers(build("llama")))
                       for kind in ("key_cache", "value_cache", "cumulative_length")]
    assert not any(str(n.target).endswith("_.default") for n in llama_static.graph.nodes)   # functional graph


def test_the_example_module_cache_is_left_empty(llama_static):
    module = wrapped("llama")
    with torch.no_grad():
        gp.export(module, (), step_kwargs(torch.randint(0, VOCAB, (2, 1)), 0))
    assert all(not b.any() for name, b in module.named_buffers() if "cache" in name or "cumulative" in name)


def test_static_cache_decoding_matches_eager(llama_static):
    assert_decodes_like_eager("llama", llama_static.module())


def test_static_cache_program_saves_loads_and_converts(llama_static, tmp_path):
    gp.save(llama_static, tmp_path / "static.gport")
    assert_decodes_like_eager("llama", gp.load(tmp_path / "static.gport").module())
    assert_decodes_like_eager("llama", to_torch(llama_static).module())


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gpt2", "gpt_neox", "phi"])
def test_static_cache_decoding_matches_eager_and_torch_export(name):
    ours = export_static(name)
    assert_decodes_like_eager(name, ours.module())
    theirs = export_static(name, lambda m, a, k: torch.export.export(m, a, k, strict=False))
    a, b = ours.module(), theirs.module()
    prompt = torch.randint(0, VOCAB, (2, 6))
    with torch.no_grad():
        for position in range(prompt.shape[1]):
            token = prompt[:, position:position + 1]
            torch.testing.assert_close(a(**step_kwargs(token, position)), b(**step_kwargs(token, position)),
                                       atol=1e-5, rtol=1e-5)
