"""Held-out vision and audio models (transformers configs, random weights) exported with a
dynamic image size or audio length: DETR, SegFormer, HuBERT and WavLM export and match
eager across their ranges, the smallest size included; MobileViT is refused for the
constraint torch.export reports, because its unfolding turns the image size into a Python
int (`int(math.ceil(h / p) * p)`), which fixes the size to the example's.

Images range over 64..256: below 33 both exporters refuse DETR and SegFormer, whose last
stage is then a single row or column (a true constraint, which graphport reports)."""
from __future__ import annotations

import pytest
import torch
import transformers as tf

import graphport as gp

from .helpers import assert_names_location, suggested_fixes
from .refusals import declared_ranges, differences, grid, read_graphport, read_torch, spec_allows

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


MOBILEVIT_SIZE_LINE = "else int(math.ceil(orig_height / patch_height) * patch_height)"


def test_mobilevit_is_refused_for_the_constraint_torch_export_reports_with_a_fix_that_exports():
    """Both exporters refuse MobileViT's dynamic image size: its unfolding computes
    `int(math.ceil(h / p) * p)`, a Python int that fixes h and w to the example's 64. The
    sizes graphport's refusal allows are those torch.export's allows, its message points at
    that transformers line, and its suggested fix exports and matches eager.

    One difference, on the batch: graphport also suggests b >= 2. Its small-size pass
    compares the trace at b = 1, where the violated guards have fixed h and w, with the
    general trace, where they are symbolic; once h and w are fixed as both exporters
    suggest, b = 1 exports (checked below). torch.export does not narrow b."""
    import transformers.models.mobilevit.modeling_mobilevit as source

    model = _model(_mobilevit)
    x = torch.randn(2, 3, 64, 64)
    spec, torch_spec = _image_spec(gp), _image_spec(torch.export)
    with pytest.raises(Exception) as theirs:   # torch raises its UserError
        torch.export.export(model, (x,), dynamic_shapes=torch_spec)
    with pytest.raises(gp.ConstraintViolationError) as ours:
        gp.export(model, (x,), dynamic_shapes=spec)
    mine, torch_refusal = read_graphport(ours.value, spec), read_torch(theirs.value, spec, torch_spec)
    points = [p for p in grid(declared_ranges(spec), dense=24) if p["b"] >= 2]
    assert not differences(points, mine.allows, torch_refusal.allows)
    examples = {"pixel_values": x.shape}
    assert not differences(points, lambda p: spec_allows(mine.refined, spec, p, examples),
                           lambda p: spec_allows(torch_refusal.refined, spec, p, examples))
    msg = str(ours.value)
    assert_names_location(msg, source.__file__, MOBILEVIT_SIZE_LINE)
    assert {"h = 64", "w = 64"} <= set(suggested_fixes(msg))
    fixed = gp.refine_dynamic_shapes_from_suggested_fixes(msg, spec)
    fixed["pixel_values"][0] = gp.Dim("b", min=1, max=8)
    ep = gp.export(model, (x,), dynamic_shapes=fixed)
    for batch in (1, 3):
        y = torch.randn(batch, 3, 64, 64, generator=torch.Generator().manual_seed(batch))
        torch.testing.assert_close(ep.module()(y).last_hidden_state, model(y).last_hidden_state, atol=1e-4, rtol=1e-4)
