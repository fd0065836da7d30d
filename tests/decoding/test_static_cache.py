"""Decoding with transformers' StaticCache, whose preallocated tensors the model writes in place.

Held by the module (transformers' export recipe), the cache's tensors are buffers: the
writes become BUFFER_MUTATION outputs and ep.module() updates its buffers on every call, as
eager does. (torch.export lifts these tensors as constants and keeps the in-place writes in
its graph; graphport's graph stays functional, so the comparison with torch is on the logits.)

Passed as an input (StaticCache registered with pytree as a user would register it), the
writes become USER_INPUT_MUTATION outputs and ep.module() writes them into the caller's cache.
"""
from __future__ import annotations

import pytest
import torch
import torch.utils._pytree as pytree
from transformers.cache_utils import Cache, StaticCache, StaticLayer
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
    module = wrapped("llama")
    with torch.no_grad():
        ep = gp.export(module, (), step_kwargs(torch.randint(0, VOCAB, (2, 1)), 0))
    # export leaves the example module's cache empty
    assert all(not b.any() for name, b in module.named_buffers() if "cache" in name or "cumulative" in name)
    return ep


def test_cache_writes_are_buffer_mutations(llama_static):
    mutated = [s.target for s in llama_static.graph_signature.output_specs if s.kind is gp.OutputKind.BUFFER_MUTATION]
    assert mutated == [f"{kind}_{i}" for i in range(layers(build("llama")))
                       for kind in ("key_cache", "value_cache", "cumulative_length")]
    assert not any(str(n.target).endswith("_.default") for n in llama_static.graph.nodes)   # functional graph


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


def _flatten_static(cache):
    layers = cache.layers
    children = [[la.keys for la in layers], [la.values for la in layers], [la.cumulative_length for la in layers]]
    return children, layers[0].max_cache_len


def _flatten_static_with_keys(cache):
    children, context = _flatten_static(cache)
    return [(pytree.MappingKey(k), c) for k, c in zip(("keys", "values", "lengths"), children)], context


def _unflatten_static(children, max_cache_len):
    layers = []
    for keys, values, length in zip(*children):
        layer = StaticLayer(max_cache_len)
        layer.keys, layer.values, layer.cumulative_length = keys, values, length
        layer.dtype, layer.device = keys.dtype, keys.device
        layer.batch_size, layer.num_heads, _, layer.k_head_dim = keys.shape
        layer.v_head_dim = values.shape[-1]
        layer.is_initialized = True
        layers.append(layer)
    cache = StaticCache.__new__(StaticCache)
    Cache.__init__(cache, layers=layers)
    return cache


@pytest.fixture(scope="module")
def registered_static_cache():
    pytree.register_pytree_node(StaticCache, _flatten_static, _unflatten_static,
                                serialized_type_name="tests.decoding.StaticCache",
                                flatten_with_keys_fn=_flatten_static_with_keys)
    yield
    pytree._deregister_pytree_node(StaticCache)


def empty_static_cache(model, batch: int) -> StaticCache:
    cache = StaticCache(config=model.config, max_cache_len=MAX_CACHE)
    with torch.no_grad():
        model(torch.zeros(batch, 1, dtype=torch.long), past_key_values=cache, use_cache=True)   # allocates
    for layer in cache.layers:
        layer.keys.zero_(), layer.values.zero_(), layer.cumulative_length.zero_()
    return cache


def export_static_input(name: str, export=gp.export):
    model = build(name)
    batch = (torch.export.Dim if export is not gp.export else gp.Dim)("batch", min=2, max=8)
    per_layer = [{0: batch}] * layers(model)
    spec = {"input_ids": {0: batch}, "past_key_values": [per_layer, per_layer, [None] * layers(model)],
            "use_cache": None}
    with torch.no_grad():
        return model, export(model, (), {"input_ids": torch.zeros(2, 1, dtype=torch.long),
                                         "past_key_values": empty_static_cache(model, 2), "use_cache": True},
                             dynamic_shapes=spec)


def assert_static_input_decodes_like_eager(model, run, batch: int) -> None:
    eager_cache, cache = empty_static_cache(model, batch), empty_static_cache(model, batch)
    prompt = torch.randint(0, VOCAB, (batch, 6))
    with torch.no_grad():
        for position in range(prompt.shape[1]):
            token = prompt[:, position:position + 1]
            expected = model(input_ids=token, past_key_values=eager_cache, use_cache=True).logits
            got = run(input_ids=token, past_key_values=cache, use_cache=True).logits
            torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    for mine, theirs in zip(cache.layers, eager_cache.layers):   # the caller's cache, written in place
        torch.testing.assert_close(mine.keys, theirs.keys)
        torch.testing.assert_close(mine.values, theirs.values)
        assert mine.cumulative_length.item() == theirs.cumulative_length.item() == prompt.shape[1]


def test_a_static_cache_input_is_written_through_user_input_mutations(registered_static_cache):
    model, ep = export_static_input("llama")
    mutated = [s.target for s in ep.graph_signature.output_specs if s.kind is gp.OutputKind.USER_INPUT_MUTATION]
    assert mutated == [f"past_key_values_{kind}_{i}" for kind in ("keys", "values", "lengths")
                       for i in range(layers(model))]
    for batch in (2, 3):
        assert_static_input_decodes_like_eager(model, ep.module(), batch)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gpt2", "gpt_neox", "phi", "llama"])
def test_static_cache_input_matches_eager_and_torch_export(registered_static_cache, name):
    model, ours = export_static_input(name)
    _, theirs = export_static_input(name, lambda *a, **k: torch.export.export(*a, strict=False, **k))
    theirs = theirs.run_decompositions({})   # functional, as graphport's graph is
    assert [(s.kind.name, s.target) for s in ours.graph_signature.output_specs] == \
        [(s.kind.name, s.target) for s in theirs.graph_signature.output_specs]
    assert_static_input_decodes_like_eager(model, ours.module(), 3)
    assert_static_input_decodes_like_eager(model, theirs.module(), 3)
