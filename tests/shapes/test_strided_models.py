"""Held-out vision and audio models (transformers configs, random weights) exported with a
dynamic image size or audio length: DETR, SegFormer, HuBERT and WavLM export and match
eager across their ranges, the smallest size included; MobileViT is refused, as
torch.export refuses it, because its unfolding turns the image size into a Python int
(`int(math.ceil(h / p) * p)`), which fixes the size to the example's.

Images range over 64..256: below 33 both exporters refuse DETR and SegFormer, whose last
stage is then a single row or column (a true constraint, which graphport reports)."""
from __future__ import annotations

import pytest
import torch
import transformers as tf

import graphport as gp

pytestmark = pytest.mark.slow    # each model takes several seconds to export

AUDIO = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
             conv_dim=(32, 32, 32), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3), num_conv_pos_embeddings=16,
             num_conv_pos_embedding_groups=4)


def _detr():
    backbone = tf.ResNetConfig(embedding_size=16, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1],
                               out_features=["stage4"])
    return tf.DetrModel(tf.DetrConfig(use_timm_backbone=False, backbone_config=backbone, d_model=64,
                                      encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                                      decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                                      num_queries=10, use_pretrained_backbone=False))


def _segformer():
    return tf.SegformerModel(tf.SegformerConfig(hidden_sizes=[16, 32, 40, 64], num_attention_heads=[1, 2, 2, 4],
                                                depths=[1, 1, 1, 1], decoder_hidden_size=64))


def _mobilevit():
    return tf.MobileViTModel(tf.MobileViTConfig(image_size=64, hidden_sizes=[32, 48, 64],
                                                neck_hidden_sizes=[8, 16, 24, 24, 32, 48, 64], num_attention_heads=2))


def _image_spec(api, lo=64):
    return {"pixel_values": {0: api.Dim("b", min=1, max=8), 2: api.Dim("h", min=lo, max=256),
                             3: api.Dim("w", min=lo, max=256)}}


def _audio_spec(api):
    return {"input_values": {0: api.Dim("b", min=1, max=8), 1: api.Dim("t", min=1000, max=16000)}}


IMAGES = [(1, 3, 64, 64), (2, 3, 97, 130), (1, 3, 256, 192)]
WAVES = [(1, 1000), (3, 5123), (1, 16000)]
MODELS = {
    "detr": (_detr, (2, 3, 64, 64), _image_spec, IMAGES),
    "segformer": (_segformer, (2, 3, 64, 64), _image_spec, IMAGES),
    "hubert": (lambda: tf.HubertModel(tf.HubertConfig(**AUDIO)), (2, 4000), _audio_spec, WAVES),
    "wavlm": (lambda: tf.WavLMModel(tf.WavLMConfig(**AUDIO)), (2, 4000), _audio_spec, WAVES),
}


def _model(make):
    torch.manual_seed(0)
    return make().eval()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_exports_with_a_dynamic_size_and_matches_eager_across_the_range(name):
    make, example, spec, sizes = MODELS[name]
    model = _model(make)
    ep = gp.export(model, (torch.randn(*example),), dynamic_shapes=spec(gp))
    for i, size in enumerate(sizes):
        x = torch.randn(*size, generator=torch.Generator().manual_seed(i))
        torch.testing.assert_close(ep.module()(x).last_hidden_state, model(x).last_hidden_state,
                                   atol=1e-4, rtol=1e-4)


def test_detr_below_33_is_refused_with_the_size_that_makes_the_last_stage_one_wide():
    """At 32 the stride-32 backbone leaves a 1x1 map, where the program's reshapes take
    another path: torch.export refuses this range too (it suggests min=33)."""
    model = _model(_detr)
    with pytest.raises(gp.ConstraintViolationError, match=r"\(h \+ 31\)//\(32\)"):
        gp.export(model, (torch.randn(2, 3, 64, 64),), dynamic_shapes=_image_spec(gp, lo=32))


def test_mobilevit_is_refused_because_its_unfolding_turns_the_size_into_an_int():
    """torch.export refuses it as well (guard `2*math.ceil(...) == 8` on the image size)."""
    model = _model(_mobilevit)
    with pytest.raises(gp.ConstraintViolationError, match="modeling_mobilevit.py"):
        gp.export(model, (torch.randn(2, 3, 64, 64),), dynamic_shapes=_image_spec(gp))
