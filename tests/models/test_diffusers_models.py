"""diffusers models called as users call them (return_dict=True, the default), built from tiny configs with
random weights: their outputs are pytree nodes registered without keys."""
import pytest
import torch

import graphport as gp
from graphport.interop import to_torch

diffusers = pytest.importorskip("diffusers")


def _unet():
    model = diffusers.UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(32, 64),
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=32, attention_head_dim=8, norm_num_groups=8)
    return model, lambda b: (torch.randn(b, 4, 8, 8), torch.arange(b) * 10 + 1, torch.randn(b, 5, 32))


def _vae():
    model = diffusers.AutoencoderKL(
        in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
        up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"), block_out_channels=(8, 16), layers_per_block=1,
        latent_channels=4, norm_num_groups=4, sample_size=16)
    return model, lambda b: (torch.randn(b, 3, 16, 16),)


def _sd3():
    model = diffusers.SD3Transformer2DModel(
        sample_size=8, patch_size=2, in_channels=4, num_layers=1, attention_head_dim=8, num_attention_heads=2,
        joint_attention_dim=16, caption_projection_dim=16, pooled_projection_dim=8, out_channels=4,
        pos_embed_max_size=16)
    return model, lambda b: (torch.randn(b, 4, 8, 8), torch.randn(b, 5, 16), torch.randn(b, 8), torch.arange(b) + 3)


def _dit():
    model = diffusers.DiTTransformer2DModel(
        num_attention_heads=2, attention_head_dim=8, in_channels=4, out_channels=4, num_layers=1, sample_size=8,
        patch_size=2, num_embeds_ada_norm=10, norm_num_groups=4)
    return model, lambda b: (torch.randn(b, 4, 8, 8), torch.arange(b) + 3, torch.arange(b) % 10)


MODELS = {"unet": _unet, "vae": _vae, "sd3": _sd3, "dit": _dit}
SLOW = {"vae", "dit"}   # the same output classes as the others; run with GRAPHPORT_SLOW=1


def _assert_output_matches(got, expected):
    assert type(got) is type(expected)
    assert list(got.keys()) == list(expected.keys())
    for key in expected.keys():
        torch.testing.assert_close(got[key], expected[key], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in sorted(MODELS)])
def test_default_return_dict_exports_with_dynamic_batch(name, tmp_path):
    torch.manual_seed(0)
    model, make_args = MODELS[name]()
    model.eval()
    args = make_args(2)
    batch = gp.Dim("batch", max=8)
    ep = gp.export(model, args, dynamic_shapes=tuple({0: batch} for _ in args))
    with torch.no_grad():
        for size in (2, 1, 5):
            fresh = make_args(size)
            _assert_output_matches(ep.module()(*fresh), model(*fresh))
        gp.save(ep, tmp_path / "model.gport")
        _assert_output_matches(gp.load(tmp_path / "model.gport").module()(*args), model(*args))
        fresh = make_args(3)
        _assert_output_matches(to_torch(ep).module()(*fresh), model(*fresh))


def test_sd3_transformer_exports_with_a_dynamic_image_size_up_to_its_position_grid():
    """SD3 crops its position grid to the image: a view of the grid at the largest size, a copy below."""
    torch.manual_seed(0)
    model, make_args = _sd3()
    model.eval()
    side = gp.Dim("side", min=1, max=8)   # latents of 4*side: 2*side patches, up to the whole 16 x 16 grid
    args = make_args(2)
    ep = gp.export(model, args, dynamic_shapes=({2: 4 * side, 3: 4 * side}, None, None, None))
    with torch.no_grad():
        for s in (8, 1, 3):
            fresh = (torch.randn(2, 4, 4 * s, 4 * s),) + args[1:]
            _assert_output_matches(ep.module()(*fresh), model(*fresh))
