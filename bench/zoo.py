"""The model zoo: real architectures, built from configs with random weights.

Why configs and not checkpoints: no downloads are allowed, and export cost depends on the
architecture's code paths, not on trained values. Configs are small (hidden 64, 2 layers,
64x64 images) so every model exports in seconds on two CPU cores; `llama_7b_meta` keeps a
full-size LLaMA-7B on the meta device to measure export cost at real scale without memory.

Each model gives example inputs at batch 2, a second input set at another shape inside its
dynamic ranges, and a dynamic-shape spec written against a Dim factory, so the same spec
builds torch.export Dims or graphport Dims.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn

Inputs = tuple[tuple[Any, ...], dict[str, Any]]
DimMaker = Callable[..., Any]

HIDDEN, LAYERS, HEADS, FFN, VOCAB, IMAGE = 64, 2, 4, 128, 1000, 64


@dataclass
class Built:
    """An instantiated model with its inputs and dynamic-shape spec."""

    module: nn.Module
    make_inputs: Callable[..., Inputs]          # sizes (batch=, seq=, ...) -> (args, kwargs)
    sizes: dict[str, int]                        # example sizes (batch 2)
    other_sizes: dict[str, int]                  # another point inside the dynamic ranges
    dynamic_shapes: Callable[[DimMaker], Any]   # Dim factory -> dynamic_shapes spec
    # where a dynamic program is checked against eager besides the example and `other_sizes`:
    # every Dim at its smallest, then more points inside the ranges (none: not checked)
    smallest_sizes: dict[str, int] | None = None
    range_sizes: tuple[dict[str, int], ...] = ()

    def example_inputs(self) -> Inputs:
        return self.make_inputs(**self.sizes)

    def other_inputs(self) -> Inputs:
        return self.make_inputs(**self.other_sizes)

    def checked(self, smallest: dict[str, int], *more: dict[str, int]) -> "Built":
        """This model with the sizes its dynamic program is also checked at."""
        self.smallest_sizes, self.range_sizes = smallest, more
        return self


@dataclass(frozen=True)
class ZooModel:
    name: str
    family: str
    build: Callable[[], Built]
    meta: bool = False   # built on the meta device: export only, never run


def _seeded(build: Callable[[], Built]) -> Callable[[], Built]:
    """Fixed seed, eval mode: the same random weights and inputs in every process."""

    def wrapped() -> Built:
        torch.manual_seed(0)
        built = build()
        built.module.eval()
        return built

    wrapped.__name__ = build.__name__
    return wrapped


def _ids(batch: int, seq: int, vocab: int = VOCAB) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, seq))


def _text(model: nn.Module, with_mask: bool = True, max_seq: int = 128) -> Built:
    """A token model taking input_ids (+ attention_mask), dynamic in batch and sequence."""

    def make(batch: int, seq: int) -> Inputs:
        kwargs = {"input_ids": _ids(batch, seq)}
        if with_mask:
            kwargs["attention_mask"] = torch.ones(batch, seq, dtype=torch.long)
        return (), kwargs

    def spec(dim: DimMaker) -> Any:
        axes = {0: dim("batch", min=1, max=64), 1: dim("seq", min=2, max=max_seq)}
        return {"input_ids": axes, **({"attention_mask": axes} if with_mask else {})}

    return Built(model, make, {"batch": 2, "seq": 16}, {"batch": 3, "seq": 24}, spec)


def _images(model: nn.Module, channels: int = 3, dynamic_size: bool = False, arg: str = "pixel_values",
            size: int = IMAGE, other_size: int = 96, max_size: int = 256, size_multiple: int = 1,
            min_size: int = 64) -> Built:
    """An image model, dynamic in batch and, where the architecture allows, image size
    (a multiple of `size_multiple` when the architecture needs exact downsampling)."""

    def make(batch: int, size: int) -> Inputs:
        return (), {arg: torch.randn(batch, channels, size, size)}

    def spec(dim: DimMaker) -> Any:
        axes = {0: dim("batch", min=1, max=64)}
        if dynamic_size:
            if size_multiple > 1:
                side = size_multiple * dim("size_blocks", min=min_size // size_multiple, max=max_size // size_multiple)
            else:
                side = dim("size", min=64, max=max_size)  # below 64 the stride-32 stages collapse to 1x1
            axes.update({2: side, 3: side})
        return {arg: axes}

    other = {"batch": 3, "size": other_size if dynamic_size else size}
    return Built(model, make, {"batch": 2, "size": size}, other, spec)


def _llama_config(**overrides: Any) -> Any:
    from transformers import LlamaConfig
    small = dict(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
                 num_attention_heads=HEADS, num_key_value_heads=2, max_position_embeddings=256, use_cache=False)
    return LlamaConfig(**{**small, **overrides})


@_seeded
def bert() -> Built:
    from transformers import BertConfig, BertModel
    cfg = BertConfig(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                     intermediate_size=FFN, max_position_embeddings=128)
    return _text(BertModel(cfg))


@_seeded
def distilbert() -> Built:
    from transformers import DistilBertConfig, DistilBertModel
    cfg = DistilBertConfig(vocab_size=VOCAB, dim=HIDDEN, n_layers=LAYERS, n_heads=HEADS, hidden_dim=FFN,
                           max_position_embeddings=128)
    return _text(DistilBertModel(cfg))


@_seeded
def gpt2() -> Built:
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(vocab_size=VOCAB, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, n_positions=128,
                     use_cache=False)
    return _text(GPT2LMHeadModel(cfg))


@_seeded
def llama() -> Built:
    from transformers import LlamaForCausalLM
    return _text(LlamaForCausalLM(_llama_config()))


@_seeded
def mistral() -> Built:
    from transformers import MistralConfig, MistralForCausalLM
    cfg = MistralConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
                        num_attention_heads=HEADS, num_key_value_heads=2, max_position_embeddings=256,
                        sliding_window=None, use_cache=False)
    return _text(MistralForCausalLM(cfg))


@_seeded
def qwen2() -> Built:
    from transformers import Qwen2Config, Qwen2ForCausalLM
    cfg = Qwen2Config(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
                      num_attention_heads=HEADS, num_key_value_heads=2, max_position_embeddings=256,
                      use_cache=False)
    return _text(Qwen2ForCausalLM(cfg))


@_seeded
def t5() -> Built:
    """Encoder-decoder forward: encoder tokens and decoder tokens, each with its own length."""
    from transformers import T5Config, T5Model
    cfg = T5Config(vocab_size=VOCAB, d_model=HIDDEN, d_kv=16, d_ff=FFN, num_layers=LAYERS, num_decoder_layers=LAYERS,
                   num_heads=HEADS, use_cache=False)

    def make(batch: int, seq: int, dec: int) -> Inputs:
        return (), {"input_ids": _ids(batch, seq), "decoder_input_ids": _ids(batch, dec)}

    def spec(dim: DimMaker) -> Any:
        b = dim("batch", min=1, max=64)
        return {"input_ids": {0: b, 1: dim("seq", min=2, max=128)},
                "decoder_input_ids": {0: b, 1: dim("dec_seq", min=2, max=128)}}

    return Built(T5Model(cfg), make, {"batch": 2, "seq": 16, "dec": 8}, {"batch": 3, "seq": 20, "dec": 5}, spec)


@_seeded
def vit() -> Built:
    from transformers import ViTConfig, ViTModel
    cfg = ViTConfig(hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS, intermediate_size=FFN,
                    image_size=IMAGE, patch_size=16)
    return _images(ViTModel(cfg, add_pooling_layer=False))


@_seeded
def whisper_encoder() -> Built:
    """The encoder checks the mel length against its positions, so only batch is dynamic."""
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder
    cfg = WhisperConfig(vocab_size=VOCAB, d_model=HIDDEN, encoder_layers=LAYERS, encoder_attention_heads=HEADS,
                        encoder_ffn_dim=FFN, decoder_layers=LAYERS, decoder_attention_heads=HEADS,
                        decoder_ffn_dim=FFN, num_mel_bins=16, max_source_positions=50)

    def make(batch: int) -> Inputs:
        return (torch.randn(batch, cfg.num_mel_bins, 2 * cfg.max_source_positions),), {}

    def spec(dim: DimMaker) -> Any:
        return ({0: dim("batch", min=1, max=64)},)

    return Built(WhisperEncoder(cfg), make, {"batch": 2}, {"batch": 3}, spec)


@_seeded
def wav2vec2() -> Built:
    from transformers import Wav2Vec2Config, Wav2Vec2Model
    cfg = Wav2Vec2Config(hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                         intermediate_size=FFN, conv_dim=(32, 32, 32), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3),
                         num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, mask_time_prob=0.0)

    def make(batch: int, samples: int) -> Inputs:
        return (torch.randn(batch, samples),), {}

    def spec(dim: DimMaker) -> Any:
        # The conv feature extractor has total stride 20: samples = 20 * frames.
        return ({0: dim("batch", min=1, max=64), 1: 20 * dim("frames", min=20, max=800)},)

    return Built(Wav2Vec2Model(cfg), make, {"batch": 2, "samples": 1600}, {"batch": 3, "samples": 2000}, spec)


@_seeded
def clip_vision() -> Built:
    from transformers import CLIPVisionConfig, CLIPVisionModel
    cfg = CLIPVisionConfig(hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
                           num_attention_heads=HEADS, image_size=IMAGE, patch_size=16)
    return _images(CLIPVisionModel(cfg))


@_seeded
def clip_text() -> Built:
    from transformers import CLIPTextConfig, CLIPTextModel
    cfg = CLIPTextConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
                         num_attention_heads=HEADS, max_position_embeddings=77)
    return _text(CLIPTextModel(cfg), max_seq=77)


@_seeded
def resnet50() -> Built:
    """ResNet-50 topology (bottleneck blocks, depths 3-4-6-3) at reduced widths."""
    from transformers import ResNetConfig, ResNetModel
    cfg = ResNetConfig(embedding_size=16, hidden_sizes=[32, 64, 128, 256], depths=[3, 4, 6, 3],
                       layer_type="bottleneck")
    return _images(ResNetModel(cfg), dynamic_size=True)


@_seeded
def convnext() -> Built:
    from transformers import ConvNextConfig, ConvNextModel
    cfg = ConvNextConfig(hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 2, 1])
    return _images(ConvNextModel(cfg), dynamic_size=True, size_multiple=32)


@_seeded
def mobilenet_v2() -> Built:
    from transformers import MobileNetV2Config, MobileNetV2Model
    cfg = MobileNetV2Config(depth_multiplier=0.35, image_size=IMAGE)
    return _images(MobileNetV2Model(cfg))  # "same" padding bakes in config.image_size


@_seeded
def efficientnet() -> Built:
    from transformers import EfficientNetConfig, EfficientNetModel
    cfg = EfficientNetConfig(width_coefficient=0.25, depth_coefficient=0.25, image_size=IMAGE, hidden_dim=320)
    return _images(EfficientNetModel(cfg), dynamic_size=True)


@_seeded
def swin() -> Built:
    from transformers import SwinConfig, SwinModel
    cfg = SwinConfig(image_size=IMAGE, patch_size=4, embed_dim=32, depths=[1, 1], num_heads=[2, 4], window_size=4)
    return _images(SwinModel(cfg))


@_seeded
def swin_v2() -> Built:
    """Swin-v2 with a dynamic image size: 32-pixel blocks, 2 to 6 of them, so the 7-wide windows
    pad every stage by a size-dependent amount (a multiple of 7 patches would make that a branch)."""
    from transformers import Swinv2Config, Swinv2Model
    cfg = Swinv2Config(image_size=IMAGE, patch_size=4, embed_dim=16, depths=[2, 2], num_heads=[2, 2], window_size=7)
    return _images(Swinv2Model(cfg), dynamic_size=True, size_multiple=32, max_size=192).checked(
        {"batch": 1, "size": 64}, {"batch": 1, "size": 128}, {"batch": 2, "size": 160}, {"batch": 3, "size": 192})


@_seeded
def swin_224() -> Built:
    """Swin v1 as published (SwinConfig's defaults: 224 px, patch 4, window 7, 4 stages of
    2, 2, 6, 2 blocks) with a dynamic batch and image side, 224 to 384 px in 32-pixel steps
    (exact patch embedding and merging). At 224 px the last stage is exactly one window: the
    model clamps its window and drops the shift there (`set_shift_and_window_size`) and pads no
    stage; every larger side pads. Checked at both sides of that question and at the ends."""
    from transformers import SwinConfig, SwinModel
    return _images(SwinModel(SwinConfig()), dynamic_size=True, size=224, other_size=288, size_multiple=32,
                   min_size=224, max_size=384).checked(
        {"batch": 1, "size": 224}, {"batch": 1, "size": 256}, {"batch": 2, "size": 320}, {"batch": 1, "size": 384})


# Image sizes the dynamic ViT-family programs are checked at: the smallest (64 px, the size of
# their position tables), then sizes whose position grids are interpolated, up to the largest.
_IMAGE_SIZES = ({"batch": 1, "size": 64}, {"batch": 1, "size": 80}, {"batch": 2, "size": 128},
                {"batch": 3, "size": 256})


@_seeded
def siglip_vision() -> Built:
    """SigLIP's vision tower with a dynamic image size: its position embeddings are interpolated."""
    from transformers import SiglipVisionConfig, SiglipVisionModel
    cfg = SiglipVisionConfig(hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
                             num_attention_heads=HEADS, image_size=IMAGE, patch_size=16)
    built = _images(SiglipVisionModel(cfg), dynamic_size=True, size_multiple=16, other_size=96)
    make, spec = built.make_inputs, built.dynamic_shapes
    built.make_inputs = lambda **sizes: ((), {**make(**sizes)[1], "interpolate_pos_encoding": True})
    built.dynamic_shapes = lambda dim: {**spec(dim), "interpolate_pos_encoding": None}
    return built.checked(*_IMAGE_SIZES)


@_seeded
def vit_interpolated() -> Built:
    """ViT called with interpolate_pos_encoding=True and a dynamic image size: the position table
    is used as is at its own size and interpolated at every other."""
    from transformers import ViTConfig, ViTModel
    cfg = ViTConfig(hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                    image_size=IMAGE, patch_size=16)
    built = _images(ViTModel(cfg, add_pooling_layer=False), dynamic_size=True, size_multiple=16, other_size=96)
    make, spec = built.make_inputs, built.dynamic_shapes
    built.make_inputs = lambda **sizes: ((), {**make(**sizes)[1], "interpolate_pos_encoding": True})
    built.dynamic_shapes = lambda dim: {**spec(dim), "interpolate_pos_encoding": None}
    return built.checked(*_IMAGE_SIZES)


@_seeded
def dinov2() -> Built:
    """DINOv2 with a dynamic image size: its position embeddings are interpolated to the patch grid."""
    from transformers import Dinov2Config, Dinov2Model
    cfg = Dinov2Config(hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                       image_size=IMAGE, patch_size=16)
    return _images(Dinov2Model(cfg), dynamic_size=True, size_multiple=16, other_size=96).checked(*_IMAGE_SIZES)


@_seeded
def mamba2() -> Built:
    """Mamba-2's chunked scan: the sequence is padded up to a multiple of the chunk size."""
    from transformers import Mamba2Config, Mamba2Model
    cfg = Mamba2Config(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_heads=4, head_dim=32,
                       state_size=16, n_groups=1, chunk_size=16, expand=2, use_cache=False)
    return _text(Mamba2Model(cfg), with_mask=False).checked(
        {"batch": 1, "seq": 2}, {"batch": 1, "seq": 16}, {"batch": 1, "seq": 17}, {"batch": 2, "seq": 33},
        {"batch": 3, "seq": 128})


@_seeded
def mamba() -> Built:
    """Mamba (v1): a selective scan over the sequence, step by step in its reference path."""
    from transformers import MambaConfig, MambaModel
    cfg = MambaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, state_size=8, expand=2,
                      conv_kernel=4, use_cache=False)
    return _text(MambaModel(cfg), with_mask=False, max_seq=64).checked(
        {"batch": 1, "seq": 2}, {"batch": 1, "seq": 33}, {"batch": 4, "seq": 64})


@_seeded
def llava() -> Built:
    """LLaVA: a CLIP vision tower whose patch features replace the image tokens of a LLaMA prompt.
    The prompt length and the batch are dynamic; each prompt holds one image's tokens."""
    from transformers import CLIPVisionConfig, LlavaConfig, LlavaForConditionalGeneration
    vision = CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                              image_size=32, patch_size=16, projection_dim=32)
    image_token = VOCAB - 1
    cfg = LlavaConfig(vision_config=vision, text_config=_llama_config(), image_token_id=image_token,
                      vision_feature_select_strategy="default", vision_feature_layer=-1)
    image_tokens = (32 // 16) ** 2

    def make(batch: int, seq: int) -> Inputs:
        ids = torch.randint(0, image_token, (batch, seq))
        ids[:, 1:1 + image_tokens] = image_token
        return (), {"input_ids": ids, "attention_mask": torch.ones(batch, seq, dtype=torch.long),
                    "pixel_values": torch.randn(batch, 3, 32, 32)}

    def spec(dim: DimMaker) -> Any:
        batch, seq = dim("batch", min=1, max=8), dim("seq", min=image_tokens + 2, max=64)
        return {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}, "pixel_values": {0: batch}}

    model = LlavaForConditionalGeneration(cfg)
    return Built(model, make, {"batch": 2, "seq": 12}, {"batch": 3, "seq": 20}, spec).checked(
        {"batch": 1, "seq": image_tokens + 2}, {"batch": 4, "seq": 64})


@_seeded
def longt5() -> Built:
    """LongT5 with local attention: the encoder works on blocks of 5 of its input length (padded when
    the length does not divide: a branch captured as a cond), checked on and off whole blocks."""
    from transformers import LongT5Config, LongT5Model
    cfg = LongT5Config(vocab_size=VOCAB, d_model=HIDDEN, d_kv=16, d_ff=FFN, num_layers=LAYERS,
                       num_decoder_layers=LAYERS, num_heads=HEADS, local_radius=4, global_block_size=4,
                       encoder_attention_type="local", use_cache=False)

    def make(batch: int, seq: int, dec: int) -> Inputs:
        # the attention mask is given: under export, LongT5's encoder does not make its own
        return (), {"input_ids": _ids(batch, seq), "attention_mask": torch.ones(batch, seq, dtype=torch.long),
                    "decoder_input_ids": _ids(batch, dec)}

    def spec(dim: DimMaker) -> Any:
        b, seq = dim("batch", min=1, max=16), dim("seq", min=1, max=128)
        return {"input_ids": {0: b, 1: seq}, "attention_mask": {0: b, 1: seq},
                "decoder_input_ids": {0: b, 1: dim("dec_seq", min=2, max=64)}}

    return Built(LongT5Model(cfg), make, {"batch": 2, "seq": 16, "dec": 8}, {"batch": 3, "seq": 21, "dec": 5},
                 spec).checked({"batch": 1, "seq": 1, "dec": 2}, {"batch": 1, "seq": 5, "dec": 3},
                               {"batch": 1, "seq": 7, "dec": 3}, {"batch": 3, "seq": 20, "dec": 8},
                               {"batch": 2, "seq": 128, "dec": 64})


@_seeded
def encodec() -> Built:
    """EnCodec: a convolutional codec with a residual vector quantizer, on a dynamic number of samples."""
    from transformers import EncodecConfig, EncodecModel
    cfg = EncodecConfig(hidden_size=32, num_filters=8, upsampling_ratios=[4, 2], codebook_size=64, codebook_dim=32,
                        num_lstm_layers=1, target_bandwidths=[24.0], sampling_rate=8000)
    stride = 8   # the product of upsampling_ratios: one code frame per 8 samples

    def make(batch: int, frames: int) -> Inputs:
        return (torch.randn(batch, 1, stride * frames),), {}

    def spec(dim: DimMaker) -> Any:
        return ({0: dim("batch", min=1, max=8), 2: stride * dim("frames", min=4, max=256)},)

    return Built(EncodecModel(cfg), make, {"batch": 2, "frames": 32}, {"batch": 3, "frames": 50}, spec).checked(
        {"batch": 1, "frames": 4}, {"batch": 2, "frames": 256})


def _diffusers_unet_model() -> nn.Module:
    from diffusers import UNet2DConditionModel
    return UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(32, 64),
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=32, attention_head_dim=8, norm_num_groups=8)


@_seeded
def sd_unet() -> Built:
    """A Stable-Diffusion UNet (cross-attention down/up blocks), called with its default return_dict:
    latents of 4 * side, the batch of latents, timesteps and text states dynamic."""

    def make(batch: int, side: int) -> Inputs:
        return (torch.randn(batch, 4, 4 * side, 4 * side), torch.arange(batch) * 10 + 1, torch.randn(batch, 5, 32)), {}

    def spec(dim: DimMaker) -> Any:
        batch, side = dim("batch", min=1, max=16), dim("side", min=1, max=16)
        return ({0: batch, 2: 4 * side, 3: 4 * side}, {0: batch}, {0: batch})

    return Built(_diffusers_unet_model(), make, {"batch": 2, "side": 2}, {"batch": 3, "side": 3}, spec).checked(
        {"batch": 1, "side": 1}, {"batch": 1, "side": 4}, {"batch": 4, "side": 5}, {"batch": 2, "side": 16})


@_seeded
def sd_vae() -> Built:
    """A diffusers AutoencoderKL (encode, sample the latent, decode) with its default return_dict."""
    from diffusers import AutoencoderKL
    model = AutoencoderKL(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 2,
                          up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(8, 16), layers_per_block=1,
                          latent_channels=4, norm_num_groups=4, sample_size=16)

    def make(batch: int, side: int) -> Inputs:
        return (torch.randn(batch, 3, 8 * side, 8 * side),), {}

    def spec(dim: DimMaker) -> Any:
        side = dim("side", min=1, max=16)
        return ({0: dim("batch", min=1, max=16), 2: 8 * side, 3: 8 * side},)

    return Built(model, make, {"batch": 2, "side": 2}, {"batch": 3, "side": 3}, spec).checked(
        {"batch": 1, "side": 1}, {"batch": 1, "side": 5}, {"batch": 4, "side": 7}, {"batch": 2, "side": 16})


@_seeded
def sd3_transformer() -> Built:
    """An SD3 MM-DiT with its default return_dict; the latent side is dynamic up to the whole
    position grid (a view of the grid at the largest size, a copy below)."""
    from diffusers import SD3Transformer2DModel
    model = SD3Transformer2DModel(sample_size=8, patch_size=2, in_channels=4, num_layers=1, attention_head_dim=8,
                                  num_attention_heads=2, joint_attention_dim=16, caption_projection_dim=16,
                                  pooled_projection_dim=8, out_channels=4, pos_embed_max_size=16)

    def make(batch: int, side: int) -> Inputs:
        return (torch.randn(batch, 4, 4 * side, 4 * side), torch.randn(batch, 5, 16), torch.randn(batch, 8),
                torch.arange(batch) + 3), {}

    def spec(dim: DimMaker) -> Any:
        batch, side = dim("batch", min=1, max=16), dim("side", min=1, max=8)
        return ({0: batch, 2: 4 * side, 3: 4 * side}, {0: batch}, {0: batch}, {0: batch})

    return Built(model, make, {"batch": 2, "side": 2}, {"batch": 3, "side": 3}, spec).checked(
        {"batch": 1, "side": 1}, {"batch": 1, "side": 5}, {"batch": 4, "side": 7}, {"batch": 2, "side": 8})


@_seeded
def dit() -> Built:
    """A class-conditioned DiT with its default return_dict; its position grid fixes the image size,
    so the batch is dynamic."""
    from diffusers import DiTTransformer2DModel
    model = DiTTransformer2DModel(num_attention_heads=2, attention_head_dim=8, in_channels=4, out_channels=4,
                                  num_layers=1, sample_size=8, patch_size=2, num_embeds_ada_norm=10, norm_num_groups=4)

    def make(batch: int) -> Inputs:
        return (torch.randn(batch, 4, 8, 8), torch.arange(batch) + 3, torch.arange(batch) % 10), {}

    def spec(dim: DimMaker) -> Any:
        batch = dim("batch", min=1, max=16)
        return ({0: batch}, {0: batch}, {0: batch})

    return Built(model, make, {"batch": 2}, {"batch": 3}, spec).checked({"batch": 1}, {"batch": 7}, {"batch": 16})


class SequenceClassifier(nn.Module):
    """Embedding, a 2-layer recurrent core, and a linear head on the last step."""

    def __init__(self, cell: type[nn.RNNBase]):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        self.rnn = cell(HIDDEN, HIDDEN, num_layers=LAYERS, batch_first=True)
        self.head = nn.Linear(HIDDEN, 10)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(self.embed(tokens))
        return self.head(out[:, -1])


def _recurrent(cell: type[nn.RNNBase]) -> Built:
    """Batch is dynamic; sequence length is not, because torch.export specializes it for
    aten.lstm/aten.gru, and a spec torch rejects would leave nothing to compare against."""

    def make(batch: int, seq: int) -> Inputs:
        return (_ids(batch, seq),), {}

    def spec(dim: DimMaker) -> Any:
        return ({0: dim("batch", min=1, max=64)},)

    return Built(SequenceClassifier(cell), make, {"batch": 2, "seq": 16}, {"batch": 3, "seq": 16}, spec)


@_seeded
def lstm() -> Built:
    return _recurrent(nn.LSTM)


@_seeded
def gru() -> Built:
    return _recurrent(nn.GRU)


@_seeded
def mlp() -> Built:
    model = nn.Sequential(nn.Linear(32, 128), nn.GELU(), nn.LayerNorm(128), nn.Linear(128, 128), nn.ReLU(),
                          nn.Dropout(0.1), nn.Linear(128, 10))

    def make(batch: int) -> Inputs:
        return (torch.randn(batch, 32),), {}

    return Built(model, make, {"batch": 2}, {"batch": 5}, lambda dim: ({0: dim("batch", min=1, max=1024)},))


@_seeded
def llama_7b_meta() -> Built:
    """Full LLaMA-7B dimensions on the meta device: export cost at real scale, no memory, no run."""
    from transformers import LlamaForCausalLM
    cfg = _llama_config(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                        num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=4096)
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg)
    built = _text(model, max_seq=4096)
    make = built.make_inputs
    built.make_inputs = lambda **sizes: _to_meta(make(**sizes))
    return built


def _to_meta(inputs: Inputs) -> Inputs:
    return tuple(a.to("meta") for a in inputs[0]), {k: v.to("meta") for k, v in inputs[1].items()}


MODELS: dict[str, ZooModel] = {m.name: m for m in [
    ZooModel("bert", "text", bert),
    ZooModel("distilbert", "text", distilbert),
    ZooModel("gpt2", "text", gpt2),
    ZooModel("llama", "text", llama),
    ZooModel("mistral", "text", mistral),
    ZooModel("qwen2", "text", qwen2),
    ZooModel("t5", "text", t5),
    ZooModel("clip_text", "text", clip_text),
    ZooModel("vit", "vision", vit),
    ZooModel("clip_vision", "vision", clip_vision),
    ZooModel("swin", "vision", swin),
    ZooModel("resnet50", "vision", resnet50),
    ZooModel("convnext", "vision", convnext),
    ZooModel("mobilenet_v2", "vision", mobilenet_v2),
    ZooModel("efficientnet", "vision", efficientnet),
    ZooModel("whisper_encoder", "audio", whisper_encoder),
    ZooModel("wav2vec2", "audio", wav2vec2),
    ZooModel("lstm", "recurrent", lstm),
    ZooModel("gru", "recurrent", gru),
    ZooModel("mlp", "mlp", mlp),
    ZooModel("llama_7b_meta", "text (meta)", llama_7b_meta, meta=True),
]}

# The families users export next (diffusion models with their default return_dict, windowed
# and interpolating vision transformers with a dynamic image size, a state-space model), kept
# apart from MODELS until every exporter test over the zoo covers them:
# `bench/run_zoo.py --section model-zoo-families --models <these>` measures them.
FAMILIES: dict[str, ZooModel] = {m.name: m for m in [
    ZooModel("sd_unet", "diffusion", sd_unet),
    ZooModel("sd_vae", "diffusion", sd_vae),
    ZooModel("sd3_transformer", "diffusion", sd3_transformer),
    ZooModel("dit", "diffusion", dit),
    ZooModel("swin_v2", "vision", swin_v2),
    ZooModel("swin_224", "vision", swin_224),
    ZooModel("siglip_vision", "vision", siglip_vision),
    ZooModel("dinov2", "vision", dinov2),
    ZooModel("vit_interpolated", "vision", vit_interpolated),
    ZooModel("mamba2", "state-space", mamba2),
    ZooModel("mamba", "state-space", mamba),
    ZooModel("llava", "multimodal", llava),
    ZooModel("longt5", "text", longt5),
    ZooModel("encodec", "audio", encodec),
]}
ALL_MODELS: dict[str, ZooModel] = {**MODELS, **FAMILIES}

# The fast slice the test suite runs on every commit (correctness only).
CI_SUBSET = ("mlp", "lstm", "bert")


def meta_copy(module: nn.Module, inputs: Inputs) -> tuple[nn.Module, Inputs]:
    """The model and inputs on the meta device, for the plain meta-tensor forward baseline."""
    return copy.deepcopy(module).to("meta"), _to_meta(inputs)
