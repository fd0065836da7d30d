"""transformers models (small configs, random weights, eval mode) exported with a dynamic
batch and sequence length, run at other sizes against eager, with the spec torch.export
accepts for them: batch = Dim("batch", max=64), seq = Dim("seq", max=128), default mins
(torch.export 2.13 records VR[0, 64] and VR[0, 128] for these)."""
from __future__ import annotations

import functools

import pytest
import torch
import transformers as tf

import graphport as gp

from .helpers import assert_same_range_constraints, canonical_range_constraints, torch_export

ATOL = 1e-5


def _ids(b, s, seed=0):
    return torch.randint(0, 1000, (b, s), generator=torch.Generator().manual_seed(seed + 97 * b + s))


def _text_inputs(b, s, **extra):
    return (_ids(b, s),), dict(extra)


def _t5_inputs(b, s, dec=None):
    return (_ids(b, s),), {"decoder_input_ids": _ids(b, dec or max(2, s // 2), seed=1), "use_cache": False}


def _image_inputs(b, s=None):
    return (torch.randn(b, 3, 32, 32, generator=torch.Generator().manual_seed(b)),), {}


def _text_spec(api, cached=True):
    spec = {"input_ids": {0: api.Dim("batch", max=64), 1: api.Dim("seq", max=128)}}
    if cached:
        spec["use_cache"] = None
    return spec


def _t5_spec(api):
    batch = api.Dim("batch", max=64)
    return {"input_ids": {0: batch, 1: api.Dim("seq", max=128)},
            "decoder_input_ids": {0: batch, 1: api.Dim("dec", max=128)}, "use_cache": None}


def _masked_inputs(b, s):
    mask = torch.ones(b, s, dtype=torch.long)
    mask[0, s // 2 + 1:] = 0          # first sequence padded
    return (_ids(b, s),), {"attention_mask": mask}


def _masked_spec(api):
    batch, seq = api.Dim("batch", max=64), api.Dim("seq", max=128)
    return {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}}


MODELS = {
    "bert": (lambda: tf.BertModel(tf.BertConfig(vocab_size=1000, num_hidden_layers=2, hidden_size=64,
                                                num_attention_heads=4, intermediate_size=128)),
             lambda b, s: _text_inputs(b, s), lambda api: _text_spec(api, cached=False)),
    "bert_with_padding_mask": (lambda: tf.BertModel(tf.BertConfig(vocab_size=1000, num_hidden_layers=2, hidden_size=64,
                                                                  num_attention_heads=4, intermediate_size=128)),
                               lambda b, s: _masked_inputs(b, s), _masked_spec),
    "gpt2": (lambda: tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=1000, n_layer=2, n_embd=64, n_head=4)),
             lambda b, s: _text_inputs(b, s, use_cache=False), _text_spec),
    "llama": (lambda: tf.LlamaForCausalLM(tf.LlamaConfig(vocab_size=1000, num_hidden_layers=2, hidden_size=64,
                                                         num_attention_heads=4, num_key_value_heads=2,
                                                         intermediate_size=128)),
              lambda b, s: _text_inputs(b, s, use_cache=False), _text_spec),
    "vit": (lambda: tf.ViTModel(tf.ViTConfig(image_size=32, patch_size=8, num_hidden_layers=2, hidden_size=64,
                                             num_attention_heads=4, intermediate_size=128)),
            _image_inputs, lambda api: {"pixel_values": {0: api.Dim("batch", max=64)}}),
    "t5": (lambda: tf.T5Model(tf.T5Config(vocab_size=1000, d_model=64, d_kv=16, d_ff=128, num_layers=2,
                                          num_heads=4)),
           _t5_inputs, _t5_spec),
}

EXAMPLE = (2, 16)
OTHER_SIZES = [(3, 9), (5, 128), (64, 2)]


@functools.cache
def _model(name):
    torch.manual_seed(0)
    return MODELS[name][0]().eval()


@functools.cache
def _exported(name):
    _, make, spec = MODELS[name]
    args, kwargs = make(*EXAMPLE)
    return gp.export(_model(name), args, kwargs, dynamic_shapes=spec(gp))


def _tensors(out):
    return [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]


def _check(name, b, s, module):
    _, make, _ = MODELS[name]
    args, kwargs = make(b, s)
    with torch.no_grad():
        expected = _tensors(_model(name)(*args, **kwargs))
        got = _tensors(module(*args, **kwargs))
    assert len(got) == len(expected), f"{name} at batch {b}, seq {s}: {len(got)} outputs, eager {len(expected)}"
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g.shape == e.shape, f"{name} at batch {b}, seq {s}: output {i} shape {tuple(g.shape)}, eager {tuple(e.shape)}"
        torch.testing.assert_close(g, e, atol=ATOL, rtol=ATOL, msg=lambda m: f"{name} at batch {b}, seq {s}, output {i}: {m}")


@pytest.mark.parametrize("name", sorted(MODELS))
def test_dynamic_batch_and_seq_match_eager_at_other_sizes(name):
    module = _exported(name).module()
    for b, s in [EXAMPLE, *OTHER_SIZES]:
        _check(name, b, s, module)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_sizes_past_the_max_are_refused(name):
    _, make, _ = MODELS[name]
    module = _exported(name).module()
    with pytest.raises(gp.InputMismatchError) as info:
        module(*make(65, 4)[0], **make(65, 4)[1])
    assert "65" in str(info.value) and "64" in str(info.value), str(info.value)
    if name != "vit":
        args, kwargs = make(2, 129)
        with pytest.raises(gp.InputMismatchError) as info:
            module(*args, **kwargs)
        assert "129" in str(info.value) and "128" in str(info.value), str(info.value)


def test_t5_batch_shared_by_encoder_and_decoder_inputs():
    module = _exported("t5").module()
    args, kwargs = _t5_inputs(3, 10)
    kwargs["decoder_input_ids"] = _ids(4, 5)
    with pytest.raises(gp.InputMismatchError) as info:
        module(*args, **kwargs)
    assert "decoder_input_ids" in str(info.value) or "input_ids" in str(info.value), str(info.value)


def test_padding_mask_must_share_batch_and_seq_with_input_ids():
    module = _exported("bert_with_padding_mask").module()
    args, kwargs = _masked_inputs(3, 9)
    for bad in (kwargs["attention_mask"][:, :8], kwargs["attention_mask"][:2]):
        with pytest.raises(gp.InputMismatchError) as info:
            module(*args, attention_mask=bad)
        assert "attention_mask" in str(info.value), str(info.value)


def test_t5_decoder_length_is_independent():
    module = _exported("t5").module()
    for s, dec in [(10, 3), (4, 20)]:
        args, kwargs = _t5_inputs(3, s, dec)
        with torch.no_grad():
            expected = _tensors(_model("t5")(*args, **kwargs))
            got = _tensors(module(*args, **kwargs))
        for g, e in zip(got, expected, strict=True):
            torch.testing.assert_close(g, e, atol=ATOL, rtol=ATOL)


# What torch.export 2.13 records for these specs (symbols renamed after the input dim they size).
INF = float("inf")
TORCH_RANGES = {
    "bert": {"in0_d0": (0, 64), "in0_d1": (0, 128)},
    "bert_with_padding_mask": {"in0_d0": (0, 64), "in0_d1": (0, 128)},
    "gpt2": {"in0_d0": (0, 64), "in0_d1": (0, 128)},
    "llama": {"in0_d0": (0, 64), "in0_d1": (0, 128)},
    "vit": {"in0_d0": (0, 64)},
    "t5": {"in0_d0": (0, 64), "in0_d1": (0, 128), "in1_d1": (0, 128)},
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_range_constraints_are_torch_exports(name):
    got = {str(k): v for k, v in canonical_range_constraints(_exported(name)).items()}
    assert got == TORCH_RANGES[name]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MODELS))
def test_symbolic_placeholders_and_range_constraints_match_torch_export(name):
    """The live oracle behind TORCH_RANGES (torch.export takes 2-10 s per model)."""
    _, make, spec = MODELS[name]
    args, kwargs = make(*EXAMPLE)
    ref = torch_export(_model(name), args, kwargs, dynamic_shapes=spec(torch.export))
    assert_same_range_constraints(_exported(name), ref)
    assert {str(k): v for k, v in canonical_range_constraints(ref).items()} == TORCH_RANGES[name]
