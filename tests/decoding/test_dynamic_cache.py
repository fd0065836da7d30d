"""Decoding with transformers' DynamicCache: a prefill program and a one-token step program,
run in a loop that feeds each step the cache the previous call returned.

Every step's logits are compared with eager's on the same tokens, at batch sizes and prompt
lengths other than the example's (batch 1 included), and with torch.export's programs for
the same models. The default suite runs GPT-2; the other models are slow.
"""
from __future__ import annotations

import re
import zipfile

import pytest
import torch
import transformers as tf

import graphport as gp
from graphport.interop import to_torch

from .cases import NAMES, VOCAB, build, decode, export_pair, greedy_tokens, layers, step_inputs

RUNS = [(3, 7, 4), (1, 4, 3), (2, 2, 5)]   # (batch, prompt length, steps): none is the example's (2, 5)


def torch_export(model, args, kwargs, dynamic_shapes):
    return torch.export.export(model, args, kwargs, dynamic_shapes=dynamic_shapes, strict=False)


def assert_decodes_like(model, prefill, step, runs=RUNS):
    for batch, length, steps in runs:
        prompt = torch.randint(0, VOCAB, (batch, length))
        tokens = greedy_tokens(model, prompt, steps)
        expected = decode(model, model, model, prompt, tokens)
        got = decode(prefill, step, model, prompt, tokens)
        assert len(got) == len(expected) == steps + 1
        for i, (g, e) in enumerate(zip(got, expected)):
            assert g.shape == e.shape == (batch, length if i == 0 else 1, VOCAB)
            torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-5, msg=lambda m: f"step {i} {(batch, length)}: {m}")


@pytest.fixture(scope="module")
def gpt2():
    model = build("gpt2")
    return model, export_pair(gp.export, model)


def test_gpt2_decoding_loop_matches_eager(gpt2):
    model, (prefill, step) = gpt2
    assert_decodes_like(model, prefill.module(), step.module())


def test_the_step_program_returns_the_cache_as_a_dynamic_cache(gpt2):
    model, (_, step) = gpt2
    inputs = step_inputs(model, batch=3, past=6)
    with torch.no_grad():
        out = step.module()(**inputs)
    assert type(out) is tf.modeling_outputs.CausalLMOutputWithCrossAttentions   # what GPT-2 returns in eager
    assert type(out.past_key_values) is tf.DynamicCache
    assert [tuple(layer.keys.shape) for layer in out.past_key_values.layers] == [(3, 4, 7, 8)] * layers(model)
    # the caller's cache is not changed by the call, as with torch.export's module()
    assert [layer.keys.shape[2] for layer in inputs["past_key_values"].layers] == [6] * layers(model)


def test_cache_tensors_are_user_inputs_and_outputs_named_after_their_path(gpt2):
    model, (_, step) = gpt2
    names = [s.arg.name for s in step.graph_signature.input_specs if s.kind is gp.InputKind.USER_INPUT]
    assert names == ["input_ids"] + [f"past_key_values_{kv}_cache_{i}" for kv in ("key", "value")
                                     for i in range(layers(model))] + ["use_cache"]
    kinds = [s.kind for s in step.graph_signature.output_specs]
    assert kinds == [gp.OutputKind.USER_OUTPUT] * (1 + 2 * layers(model))


def test_a_cache_outside_the_declared_range_is_refused(gpt2):
    model, (_, step) = gpt2
    with pytest.raises(AssertionError, match="past"):
        step.module()(**step_inputs(model, batch=2, past=97))


def test_a_cache_with_another_layer_count_is_refused(gpt2):
    model, (_, step) = gpt2
    inputs = step_inputs(model)
    inputs["past_key_values"].layers.pop()
    with pytest.raises(ValueError, match=re.escape("is a DynamicCache whose pytree context is [['key_cache', "
                                                   "'value_cache'], [None]], expected [['key_cache', 'value_cache'], "
                                                   "[None, None]]")):
        step.module()(**inputs)


def test_saved_and_loaded_programs_decode_like_eager(gpt2, tmp_path):
    model, (prefill, step) = gpt2
    gp.save(prefill, tmp_path / "prefill.gport")
    gp.save(step, tmp_path / "step.gport")
    prefill2, step2 = gp.load(tmp_path / "prefill.gport"), gp.load(tmp_path / "step.gport")
    assert step2.call_spec.in_spec == step.call_spec.in_spec
    assert_decodes_like(model, prefill2.module(), step2.module(), RUNS[:2])


def test_the_archive_names_the_cache_type_and_load_finds_it_among_registered_types(gpt2, tmp_path, monkeypatch):
    _, (_, step) = gpt2
    gp.save(step, tmp_path / "step.gport")
    with zipfile.ZipFile(tmp_path / "step.gport") as archive:
        text = archive.read("graphport.json").decode()
    assert '"type": "transformers.cache_utils.DynamicCache"' in text.replace('":"', '": "')
    # not registered in the loading process: an error that names it, and no import is tried
    monkeypatch.delitem(torch.utils._pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE, "transformers.cache_utils.DynamicCache")
    with pytest.raises(gp.errors.ArtifactError, match="transformers.cache_utils.DynamicCache, which is not registered"):
        gp.load(tmp_path / "step.gport")


def test_programs_converted_to_torch_export_decode_like_eager(gpt2):
    model, (prefill, step) = gpt2
    assert_decodes_like(model, to_torch(prefill).module(), to_torch(step).module(), RUNS[:2])


def test_static_export_with_a_filled_cache_leaves_the_example_cache_untouched():
    model = build("gpt_neox")
    inputs = step_inputs(model, batch=2, past=5)
    cache = inputs["past_key_values"]
    before = [(layer.keys, layer.keys.clone(), layer.values.clone()) for layer in cache.layers]
    with torch.no_grad():
        ep = gp.export(model, (), inputs)
        expected = model(input_ids=inputs["input_ids"], past_key_values=tf.DynamicCache(
            [(k.clone(), v.clone()) for _, k, v in before]), use_cache=True)
    for layer, (same, keys, values) in zip(cache.layers, before):
        assert layer.keys is same and type(layer.keys) is torch.Tensor
        assert torch.equal(layer.keys, keys) and torch.equal(layer.values, values)
    with torch.no_grad():
        got = ep.module()(**inputs)
    torch.testing.assert_close(got.logits, expected.logits)
    for g, e in zip(got.past_key_values.layers, expected.past_key_values.layers):
        torch.testing.assert_close(g.keys, e.keys)
        torch.testing.assert_close(g.values, e.values)


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_decoding_loop_matches_eager(name):
    model = build(name)
    prefill, step = export_pair(gp.export, model)
    assert_decodes_like(model, prefill.module(), step.module())


def torch_dims(name: str):
    """torch.export's Dims; for LLaMA, `past` is Dim.AUTO: torch.export refuses the step program
    with Dim("past") (a guard on it that it cannot prove: min(8 + 8*past, 16 + 16*past) == 8 + 8*past)."""
    def dim(dim_name, min=None, max=None):
        if name == "llama" and dim_name == "past":
            return torch.export.Dim.AUTO(min=min, max=max)
        return torch.export.Dim(dim_name, min=min, max=max)
    return dim


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_decoding_loop_matches_torch_export(name):
    model = build(name)
    ours = export_pair(gp.export, model)
    theirs = export_pair(torch_export, model, torch_dims(name))
    for batch, length, steps in RUNS:
        prompt = torch.randint(0, VOCAB, (batch, length))
        tokens = greedy_tokens(model, prompt, steps)
        got = decode(ours[0].module(), ours[1].module(), model, prompt, tokens)
        expected = decode(theirs[0].module(), theirs[1].module(), model, prompt, tokens)
        for g, e in zip(got, expected):
            torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-5)
    for mine, torch_program in zip(ours, theirs):
        assert mine.call_spec.in_spec == torch_program.call_spec.in_spec
        assert mine.call_spec.out_spec == torch_program.call_spec.out_spec
        assert [s.kind.name for s in mine.graph_signature.output_specs] == \
            [s.kind.name for s in torch_program.graph_signature.output_specs]
