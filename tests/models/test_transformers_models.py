"""Real models from transformers, built from small configs with random weights."""
import pytest
import torch
import transformers as tf

import graphport as gp

TEXT = torch.randint(0, 1000, (2, 16))
IMAGE = torch.randn(2, 3, 32, 32)


def _text(cls, config_cls, **cfg):
    return lambda: (cls(config_cls(vocab_size=1000, **cfg)), (TEXT,), {})


MODELS = {
    "bert": _text(tf.BertModel, tf.BertConfig, num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                  intermediate_size=128),
    "gpt2": lambda: (tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=1000, n_layer=2, n_embd=64, n_head=4)), (TEXT,),
                     {"use_cache": False}),
    "llama": lambda: (tf.LlamaForCausalLM(tf.LlamaConfig(vocab_size=1000, num_hidden_layers=2, hidden_size=64,
                                                         num_attention_heads=4, num_key_value_heads=2,
                                                         intermediate_size=128)), (TEXT,), {"use_cache": False}),
    "vit": lambda: (tf.ViTModel(tf.ViTConfig(image_size=32, patch_size=8, num_hidden_layers=2, hidden_size=64,
                                             num_attention_heads=4, intermediate_size=128)), (IMAGE,), {}),
    "t5": lambda: (tf.T5Model(tf.T5Config(vocab_size=1000, d_model=64, d_kv=16, d_ff=128, num_layers=2,
                                          num_heads=4)), (TEXT,), {"decoder_input_ids": TEXT[:, :8],
                                                                   "use_cache": False}),
    "resnet": lambda: (tf.ResNetModel(tf.ResNetConfig(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1],
                                                      layer_type="basic")), (IMAGE,), {}),
}


def _leaves(out):
    return [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_exports_and_matches_eager(name):
    model, args, kwargs = MODELS[name]()
    model.eval()
    ep = gp.export(model, args, kwargs)
    with torch.no_grad():
        expected = _leaves(model(*args, **kwargs))
        got = _leaves(ep.module()(*args, **kwargs))
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-5)
    # no weight is copied: the program's state is the model's own tensors
    for name_, p in model.named_parameters():
        assert ep.state_dict[name_] is p


def test_llama_7b_on_meta_device_exports_without_weights():
    with torch.device("meta"):
        model = tf.LlamaForCausalLM(tf.LlamaConfig())  # 7B-sized defaults: 32 layers, hidden 4096
    model.eval()
    ids = torch.randint(0, 1000, (1, 64), device="meta")
    ep = gp.export(model, (ids,), {"use_cache": False})
    logits = ep.graph.output_node().args[0][0].meta["val"]
    assert list(logits.shape) == [1, 64, 32000]
    assert sum(p.numel() for p in ep.parameters()) > 6e9
    assert all(p.device.type == "meta" for p in ep.parameters())
