"""Shape patterns of vision and audio models under dynamic image sizes and audio lengths.

Each pattern is exported by graphport and by torch.export with the same spec. Where
torch.export accepts it, graphport must too (no false violations from an algebra that
cannot compare strided sizes), and the program must match eager at sizes across the
ranges, the smallest included. Where both refuse, they must refuse for the same
constraint: the sizes graphport's message allows are the sizes torch.export's allows
(`refusals.py` reads both messages by meaning). The exceptions are listed with their
reasons: patterns graphport exports because it proved the sizes where a dim is 1
(TORCH_EXPORT_ALONE_REFUSES), and refusals where graphport allows more sizes than
torch.export, each with a spec in between that graphport exports and torch refuses,
checked against eager (GRAPHPORT_REFUSES_LESS).
"""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import graphport as gp

from .refusals import declared_ranges, differences, grid, read_graphport, read_torch, spec_allows

T = nn.Module


class StridedConvTokens(T):
    """Patch embedding: a strided conv, flatten(2).transpose(1, 2), then a Linear."""
    def __init__(self, stride=2, kernel=3, padding=1):
        super().__init__()
        self.conv, self.proj = nn.Conv2d(3, 8, kernel, stride=stride, padding=padding), nn.Linear(8, 8)

    def forward(self, x):
        return self.proj(self.conv(x).flatten(2).transpose(1, 2))


class ConvStack(T):
    """Stacked strided convolutions with padding and dilation, then a norm over tokens."""
    def __init__(self, dilation=1, depth=4):
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv2d(4 if i else 3, 4, 3, stride=2, padding=dilation, dilation=dilation)
                                   for i in range(depth))
        self.norm = nn.LayerNorm(4)

    def forward(self, x):
        for conv in self.convs:
            x = conv(x).relu()
        return self.norm(x.flatten(2).transpose(1, 2))


class OverlappingPatches(T):
    """SegFormer-like stages: overlapping patch embeddings, tokens, spatial reduction."""
    def __init__(self):
        super().__init__()
        self.embeds = nn.ModuleList([nn.Conv2d(3, 8, 7, 4, 3), nn.Conv2d(8, 8, 3, 2, 1), nn.Conv2d(8, 8, 3, 2, 1)])
        self.reduce = nn.Conv2d(8, 8, 2, 2)
        self.norm = nn.LayerNorm(8)

    def forward(self, x):
        for embed in self.embeds:
            x = embed(x)
            b, c, h, w = x.shape
            tokens = self.norm(x.flatten(2).transpose(1, 2))
            x = tokens.transpose(1, 2).reshape(b, c, h, w)
        kv = self.reduce(x).flatten(2).transpose(1, 2)
        q = x.flatten(2).transpose(1, 2)
        return torch.softmax(q @ kv.transpose(1, 2), -1) @ kv


class AudioFrontEnd(T):
    """wav2vec2-style feature extractor: strided Conv1d stack, GroupNorm, then a Linear."""
    def __init__(self):
        super().__init__()
        self.convs = nn.ModuleList([nn.Conv1d(1, 16, 10, 5), nn.Conv1d(16, 16, 3, 2), nn.Conv1d(16, 16, 3, 2)])
        self.norm = nn.GroupNorm(16, 16)
        self.proj = nn.Linear(16, 8)

    def forward(self, wave):
        x = self.norm(self.convs[0](wave[:, None]))
        for conv in self.convs[1:]:
            x = F.gelu(conv(x))
        return self.proj(x.transpose(1, 2))


class AudioReshapeByBatch(T):
    """Frames flattened with the batch and split back: `Mod(b*L, b)` and `(b*L)//b`."""
    def __init__(self):
        super().__init__()
        self.conv, self.proj = nn.Conv1d(1, 4, 10, 5), nn.Linear(4, 4)

    def forward(self, wave):
        x = self.conv(wave[:, None]).transpose(1, 2)
        b, frames, c = x.shape
        return self.proj(x.reshape(-1, c)).view(b, -1, c)


class Pooling(T):
    def __init__(self, ceil_mode, kernel=3, stride=2):
        super().__init__()
        self.pool = nn.MaxPool2d(kernel, stride, ceil_mode=ceil_mode)

    def forward(self, x):
        return self.pool(x).flatten(1)


class AvgPoolPadded(T):
    def forward(self, x):
        return F.avg_pool2d(x, 3, 2, padding=1, ceil_mode=True, count_include_pad=False)


class Interpolate(T):
    def __init__(self, **how):
        super().__init__()
        self.how = how

    def forward(self, x):
        return F.interpolate(x, **self.how)


class PixelShuffle(T):
    def forward(self, x):
        return F.pixel_unshuffle(F.pixel_shuffle(x, 2), 2)


class PadToMultiple(T):
    """Windowed attention: pad height and width up to a multiple of the window, then split."""
    def __init__(self, window=4):
        super().__init__()
        self.window = window

    def forward(self, x):
        b, c, h, w = x.shape
        pad_h, pad_w = (self.window - h % self.window) % self.window, (self.window - w % self.window) % self.window
        x = F.pad(x, (0, pad_w, 0, pad_h))
        H, W = x.shape[2], x.shape[3]
        windows = x.view(b, c, H // self.window, self.window, W // self.window, self.window)
        return windows.permute(0, 2, 4, 3, 5, 1).reshape(-1, self.window * self.window, c).sum(1)


class CeilToPatches(T):
    """MobileViT's unfolding size: `ceil(h / p) * p` written with math.ceil."""
    def __init__(self, patch=2):
        super().__init__()
        self.patch = patch

    def forward(self, x):
        h, w = x.shape[-2:]
        new_h, new_w = int(math.ceil(h / self.patch) * self.patch), int(math.ceil(w / self.patch) * self.patch)
        return x.new_zeros(x.shape[0], new_h, new_w) + x.mean()


class Unfold(T):
    def forward(self, x):
        return F.unfold(x, 3, stride=2, padding=1).transpose(1, 2)


class DepthwiseSeparable(T):
    def __init__(self):
        super().__init__()
        self.dw, self.pw = nn.Conv2d(3, 3, 3, 2, 1, groups=3), nn.Conv2d(3, 6, 1)

    def forward(self, x):
        return self.pw(self.dw(x)).mean((2, 3))


class TransposedConv(T):
    def __init__(self):
        super().__init__()
        self.down, self.up = nn.Conv2d(3, 4, 3, 2, 1), nn.ConvTranspose2d(4, 3, 4, 2, 1)

    def forward(self, x):
        return self.up(self.down(x))


class AdaptivePool(T):
    def forward(self, x):
        return F.adaptive_avg_pool2d(x, (4, 4)).flatten(1)


class FrameSplit(T):
    """Audio framing with unfold on the time axis (hop and window)."""
    def forward(self, wave):
        return wave.unfold(-1, 16, 8).mean(-1)


class ConvThenAttentionPool(T):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(1, 8, 4, 4)
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, wave):
        x = self.conv(wave[:, None]).transpose(1, 2)
        return self.attn(x, x, x, need_weights=False)[0].mean(1)



class PositionInterpolation(T):
    """ViT at a dynamic image size: the position table resized to the patch grid."""
    def __init__(self, patch=16):
        super().__init__()
        self.patch = patch
        self.embed = nn.Conv2d(3, 8, patch, patch)
        self.pos = nn.Parameter(torch.randn(1, 8, 4, 4))

    def forward(self, x):
        tokens = self.embed(x)
        pos = F.interpolate(self.pos, size=tokens.shape[-2:], mode="bicubic", align_corners=False)
        return (tokens + pos).flatten(2).transpose(1, 2)


class UpsampleToInput(T):
    """Segmentation decode head: features at 1/4 resolution upsampled back to the input's size."""
    def __init__(self):
        super().__init__()
        self.down = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.ReLU(), nn.Conv2d(8, 8, 3, 2, 1))
        self.head = nn.Conv2d(8, 2, 1)

    def forward(self, x):
        logits = self.head(self.down(x))
        return F.interpolate(logits, size=x.shape[-2:], mode="bilinear", align_corners=False)


class SuperResolution(T):
    """ESPCN: a conv to r*r*c channels, then pixel shuffle by r."""
    def __init__(self, r=3):
        super().__init__()
        self.conv = nn.Conv2d(3, 3 * r * r, 3, padding=1)
        self.shuffle = nn.PixelShuffle(r)

    def forward(self, x):
        return self.shuffle(self.conv(x))


class DilatedTdnn(T):
    """x-vector: Conv1d with dilations 1, 2, 3 (no padding), then mean and std over time."""
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Conv1d(12, 16, 5, dilation=1), nn.Conv1d(16, 16, 3, dilation=2),
                                     nn.Conv1d(16, 16, 3, dilation=3)])

    def forward(self, feats):
        x = feats.transpose(1, 2)
        for layer in self.layers:
            x = layer(x).relu()
        return torch.cat([x.mean(-1), x.std(-1)], -1)


class ConvPositionalEmbedding(T):
    """wav2vec2's positional conv: an even kernel padded by half, the extra last frame cut."""
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(8, 8, 16, padding=8, groups=4)

    def forward(self, hidden):
        x = self.conv(hidden.transpose(1, 2))[:, :, :-1]
        return hidden + F.gelu(x).transpose(1, 2)


class SpectrogramCnn(T):
    """Audio CNN over (mel, time): strides on both axes, ceil-mode pooling, then the
    (channels x mel) plane flattened into a Linear per time step."""
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, stride=(2, 1), padding=1)
        self.pool = nn.MaxPool2d(2, ceil_mode=True)
        self.proj = nn.Linear(4 * 10, 8)

    def forward(self, mel):
        x = self.pool(self.conv(mel[:, None]).relu())    # (b, 4, 10, t)
        return self.proj(x.permute(0, 3, 1, 2).flatten(2))


class AvgPoolTime(T):
    def forward(self, wave):
        return F.avg_pool1d(wave[:, None], 5, 3, ceil_mode=True)


class ReflectFraming(T):
    """STFT-style framing: reflect-pad by half a window, then overlapping frames."""
    def forward(self, wave):
        return F.pad(wave[:, None], (8, 8), mode="reflect")[:, 0].unfold(-1, 16, 4).abs().mean(-1)


class ConvStemWithPositions(T):
    """Whisper's encoder stem: two Conv1d (the second strided), then a slice of a fixed
    position table as long as the frames."""
    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv1d(8, 8, 3, padding=1), nn.Conv1d(8, 8, 3, 2, padding=1)
        self.pos = nn.Parameter(torch.randn(1500, 8))

    def forward(self, mel):
        x = F.gelu(self.c2(F.gelu(self.c1(mel)))).transpose(1, 2)
        return x + self.pos[: x.shape[1]]


class ChannelsLastDownsample(T):
    """ConvNeXt's downsampling: a LayerNorm in channels-last order, then a 2x2 stride-2 conv."""
    def __init__(self):
        super().__init__()
        self.norm, self.conv = nn.LayerNorm(3), nn.Conv2d(3, 6, 2, 2)

    def forward(self, x):
        x = self.norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        return self.conv(x).flatten(2).transpose(1, 2)


class DilatedMaxPool(T):
    def forward(self, x):
        return F.max_pool2d(x, 3, 2, padding=1, dilation=2)


class InterpolateFractional(T):
    def forward(self, x):
        return F.interpolate(x, scale_factor=1.5, mode="nearest")


class ShiftedWindows(T):
    """Swin's window attention on a dynamic image: patch tokens in channels-last order,
    padded up to a multiple of the window, shifted by half a window, attended within each
    window, then unshifted and cropped back."""
    def __init__(self, window=7, dim=8):
        super().__init__()
        self.window, self.embed, self.qkv = window, nn.Conv2d(3, dim, 4, 4), nn.Linear(dim, 3 * dim)

    def forward(self, x):
        x = self.embed(x).permute(0, 2, 3, 1)
        b, h, w, c = x.shape
        win = self.window
        x = F.pad(x, (0, 0, 0, (win - w % win) % win, 0, (win - h % win) % win))
        hp, wp = x.shape[1], x.shape[2]
        x = torch.roll(x, (-(win // 2), -(win // 2)), (1, 2))
        windows = x.view(b, hp // win, win, wp // win, win, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, win * win, c)
        q, k, v = self.qkv(windows).chunk(3, -1)
        out = torch.softmax(q @ k.transpose(1, 2), -1) @ v
        out = out.view(b, hp // win, wp // win, win, win, c).permute(0, 1, 3, 2, 4, 5).reshape(b, hp, wp, c)
        return torch.roll(out, (win // 2, win // 2), (1, 2))[:, :h, :w]


class CeilChunks(T):
    """Audio chunking: the number of chunks as a ceiling written with floor division,
    `(t + n - 1) // n`, the wave padded to that many chunks, each chunk projected."""
    def __init__(self, chunk=160):
        super().__init__()
        self.chunk, self.proj = chunk, nn.Linear(chunk, 8)

    def forward(self, wave):
        b, t = wave.shape
        chunks = (t + self.chunk - 1) // self.chunk
        return self.proj(F.pad(wave, (0, chunks * self.chunk - t)).view(b, chunks, self.chunk))


class NegativeFloorCeil(T):
    """A patch grid's height as `-(-h // p)` (a ceiling as a negated floor division): rows
    padded to whole patches, then averaged per patch row."""
    def __init__(self, patch=4):
        super().__init__()
        self.patch = patch

    def forward(self, x):
        b, c, h, w = x.shape
        rows = -(-h // self.patch)
        x = F.pad(x, (0, 0, 0, rows * self.patch - h))
        return x.view(b, c, rows, self.patch, w).mean(3)


class NestedFloorLengths(T):
    """One length reached along two paths: `(t // 2) // 3` (two strided poolings) and
    `t // 6` (one), which must be seen to be the same to add the two."""
    def forward(self, wave):
        x = wave[:, None]
        twice = F.avg_pool1d(F.avg_pool1d(x, 2), 3)
        once = F.avg_pool1d(x, 6)
        return (twice + once)[:, 0]


class NestedFloorCrop(T):
    """A feature pyramid: two stride-2 poolings give `(h // 2) // 2`; the input strided by 4
    has `(h + 3) // 4` rows, cropped to the pooled map's size before they are added."""
    def forward(self, x):
        pooled = F.max_pool2d(F.max_pool2d(x, 2), 2)
        ph, pw = pooled.shape[-2:]
        return pooled + x[:, :, ::4, ::4][:, :, :ph, :pw]


def image(api, lo=32, hi=256, batch=True):
    spec = {2: api.Dim("h", min=lo, max=hi), 3: api.Dim("w", min=lo, max=hi)}
    if batch:
        spec[0] = api.Dim("b", min=1, max=8)
    return lambda: {"x": spec}


def audio(api, lo=400, hi=16000):
    return lambda: {"wave": {0: api.Dim("b", min=1, max=8), 1: api.Dim("t", min=lo, max=hi)}}


def sequence(api, name, lo, hi, axis=1):
    """A batch of sequences (audio features, hidden states) with a dynamic length on `axis`."""
    return lambda: {name: {0: api.Dim("b", min=1, max=8), axis: api.Dim("t", min=lo, max=hi)}}


def image_multiple(api, k=32, lo=1, hi=8):
    return lambda: {"x": {0: api.Dim("b", min=1, max=8), 2: k * api.Dim("dh", min=lo, max=hi),
                          3: k * api.Dim("dw", min=lo, max=hi)}}


# name -> (module factory, example input, spec builder, sizes to compare at, channels)
CASES = {
    "patch_embed_stride2": (StridedConvTokens, (2, 3, 64, 48), lambda a: image(a, 3, 256), [(1, 3, 3), (3, 17, 9), (2, 256, 100)]),
    "patch_embed_stride4_k4": (lambda: StridedConvTokens(4, 4, 0), (2, 3, 64, 64), lambda a: image(a, 8, 256), [(1, 8, 8), (3, 33, 61)]),
    "patch_embed_stride16": (lambda: StridedConvTokens(16, 16, 0), (2, 3, 224, 224), lambda a: image_multiple(a, 16, 2, 16), [(1, 32, 48), (2, 256, 64)]),
    "conv_stack": (ConvStack, (2, 3, 64, 64), lambda a: image(a, 32, 256), [(1, 32, 32), (2, 45, 77), (1, 256, 256)]),
    "conv_stack_dilated": (lambda: ConvStack(dilation=2), (2, 3, 64, 64), lambda a: image(a, 64, 256), [(1, 64, 64), (2, 99, 130)]),
    "conv_stack_deep": (lambda: ConvStack(depth=6), (2, 3, 256, 256), lambda a: image(a, 128, 512), [(1, 128, 128), (2, 300, 511)]),
    "overlapping_patches": (OverlappingPatches, (2, 3, 160, 192), lambda a: image(a, 128, 256), [(1, 128, 128), (1, 201, 255)]),
    "depthwise_separable": (DepthwiseSeparable, (2, 3, 64, 64), lambda a: image(a, 2, 256), [(1, 2, 2), (3, 31, 77)]),
    "transposed_conv": (TransposedConv, (2, 3, 64, 64), lambda a: image_multiple(a, 2, 2, 64), [(1, 4, 6), (2, 66, 128)]),
    "maxpool_floor": (lambda: Pooling(False), (2, 3, 64, 64), lambda a: image(a, 3, 256), [(1, 3, 3), (2, 44, 97)]),
    "maxpool_ceil": (lambda: Pooling(True), (2, 3, 64, 64), lambda a: image(a, 3, 256), [(1, 3, 4), (2, 44, 97)]),
    "avgpool_ceil_padded": (AvgPoolPadded, (2, 3, 64, 64), lambda a: image(a, 2, 256), [(1, 2, 2), (2, 47, 90)]),
    "adaptive_pool": (AdaptivePool, (2, 3, 64, 64), lambda a: image(a, 4, 256), [(1, 4, 4), (2, 37, 255)]),
    "interpolate_scale2": (lambda: Interpolate(scale_factor=2, mode="nearest"), (2, 3, 16, 16), lambda a: image(a, 1, 128), [(1, 1, 1), (2, 9, 33)]),
    "interpolate_bilinear_half": (lambda: Interpolate(scale_factor=0.5, mode="bilinear", align_corners=False), (2, 3, 16, 16), lambda a: image(a, 2, 128), [(1, 2, 2), (2, 9, 33)]),
    "interpolate_to_size": (lambda: Interpolate(size=(24, 24), mode="bilinear", align_corners=True), (2, 3, 16, 16), lambda a: image(a, 2, 128), [(1, 2, 3), (2, 99, 33)]),
    "pixel_shuffle": (PixelShuffle, (2, 8, 16, 16), lambda a: image(a, 1, 64), [(1, 1, 1), (2, 9, 31)]),
    "pad_to_window": (PadToMultiple, (2, 3, 30, 37), lambda a: image(a, 1, 128), [(1, 1, 1), (2, 4, 9), (1, 127, 64)]),
    "unfold_patches": (Unfold, (2, 3, 32, 32), lambda a: image(a, 2, 128), [(1, 2, 2), (2, 33, 17)]),
    "ceil_to_patches": (CeilToPatches, (2, 3, 31, 32), lambda a: image(a, 1, 128), [(1, 1, 1), (2, 33, 18)]),
    "audio_front_end": (AudioFrontEnd, (2, 4000), lambda a: audio(a), [(1, 400), (3, 5123), (1, 16000)]),
    "audio_reshape_by_batch": (AudioReshapeByBatch, (2, 4000), lambda a: audio(a, 10), [(1, 10), (3, 5123)]),
    "audio_framing": (FrameSplit, (2, 400), lambda a: audio(a, 16), [(1, 16), (3, 401)]),
    "audio_conv_attention": (ConvThenAttentionPool, (2, 400), lambda a: audio(a, 8, 4000), [(1, 8), (2, 999)]),
    "position_interpolation": (PositionInterpolation, (2, 3, 64, 48), lambda a: image_multiple(a, 16, 1, 16), [(1, 16, 16), (2, 256, 48)]),
    "upsample_to_input": (UpsampleToInput, (2, 3, 64, 48), lambda a: image(a, 2, 256), [(1, 2, 2), (2, 45, 77)]),
    "super_resolution": (SuperResolution, (2, 3, 16, 12), lambda a: image(a, 1, 128), [(1, 1, 1), (2, 17, 30)]),
    "channels_last_downsample": (ChannelsLastDownsample, (2, 3, 64, 48), lambda a: image(a, 2, 256), [(1, 2, 2), (2, 45, 77)]),
    "maxpool_dilated": (DilatedMaxPool, (2, 3, 64, 48), lambda a: image(a, 5, 256), [(1, 5, 5), (2, 45, 77)]),
    "interpolate_fractional": (InterpolateFractional, (2, 3, 16, 12), lambda a: image(a, 1, 128), [(1, 1, 1), (2, 17, 30)]),
    "audio_dilated_tdnn": (DilatedTdnn, (2, 50, 12), lambda a: sequence(a, "feats", 13, 3000), [(1, 13, 12), (3, 777, 12)]),
    "audio_positional_conv": (ConvPositionalEmbedding, (2, 50, 8), lambda a: sequence(a, "hidden", 2, 3000), [(1, 2, 8), (3, 777, 8)]),
    "audio_spectrogram_cnn": (SpectrogramCnn, (2, 40, 100), lambda a: sequence(a, "mel", 1, 3000, axis=2), [(1, 40, 1), (3, 40, 777)]),
    "audio_avgpool_ceil": (AvgPoolTime, (2, 400), lambda a: audio(a, 5), [(1, 5), (3, 401)]),
    "audio_reflect_framing": (ReflectFraming, (2, 400), lambda a: audio(a, 16), [(1, 16), (3, 401)]),
    "audio_conv_stem_positions": (ConvStemWithPositions, (2, 8, 300), lambda a: sequence(a, "mel", 2, 3000, axis=2), [(1, 8, 2), (3, 8, 3000), (2, 8, 777)]),
    "shifted_windows": (ShiftedWindows, (2, 3, 64, 80), lambda a: image(a, 32, 256), [(1, 32, 32), (2, 60, 101), (1, 256, 255)]),
    "ceil_chunks": (CeilChunks, (2, 4000), lambda a: audio(a, 161), [(1, 161), (3, 320), (2, 16000)]),
    "negative_floor_ceil": (NegativeFloorCeil, (2, 3, 30, 16), lambda a: image(a, 5, 128), [(1, 5, 5), (2, 8, 9), (1, 127, 64)]),
    "nested_floor_lengths": (NestedFloorLengths, (2, 400), lambda a: audio(a, 12), [(1, 12), (3, 401), (2, 16000)]),
    "nested_floor_crop": (NestedFloorCrop, (2, 3, 64, 48), lambda a: image(a, 8, 256), [(1, 8, 8), (2, 45, 77), (1, 256, 9)]),
}

def _example(name, shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _input_shape(name, size, example_shape):
    if len(size) == len(example_shape):
        return size
    b, h, w = size
    return (b, example_shape[1], h, w)


def _api(which):
    if which == "graphport":
        return gp
    import torch.export as te
    return te


SLOW = {"pad_to_window", "overlapping_patches", "conv_stack_deep"}   # several seconds each to export or refuse

# Where torch.export refuses and graphport exports, and why graphport is right. Mostly
# torch.export turns a guard that an intermediate size is not 1 (`(h - 1)//2 + 1 != 1`)
# into a refusal of the sizes where it is; graphport traces the program again at those
# sizes and exports when it computes the same there. Each is checked against eager at its
# range's smallest sizes, the ones torch refuses.
TORCH_EXPORT_ALONE_REFUSES = {
    "depthwise_separable": "the strided map is 1x1 at h, w <= 2; torch refuses h, w <= 2",
    "avgpool_ceil_padded": "torch suggests even sizes from a guard (`2*(h//2) < h + 1`) that holds for every h",
    "interpolate_bilinear_half": "the half-size output is 1 at h, w in {2, 3}; torch refuses them",
    "audio_framing": "a single frame at t < 24; torch refuses t in 16..23",
    "upsample_to_input": "the 1/4 map is 1 wide at h, w <= 4; torch refuses them",
    "audio_spectrogram_cnn": "torch suggests even lengths from a guard (`2*((t - 1)//2) < t`) that holds for every t",
    "audio_avgpool_ceil": "torch suggests t = 3*k - 2 from a guard (`3*(t//3) - 3 < t`) that holds for every t",
    "audio_conv_stem_positions": "one frame at t <= 2, which torch refuses",
    "audio_reshape_by_batch": "one frame at t < 15, which torch refuses",
    "shifted_windows": "torch cannot prove that a size padded to a multiple of 7 over its number of windows is 7 "
                       "(`hp // (hp // 7) == 7`); graphport reads hp as 7*(hp // 7)",
    "nested_floor_crop": "torch suggests multiples of 4 from `h//4 <= (h + 3)//4`, which holds for every h",
    # flatten of a map with one element (or one column) is a view where larger maps are copied;
    # the values are the same and nothing writes into either, so graphport proves every size
    "maxpool_floor": "flatten(1) of a 1x1 pooled map (h, w <= 4) is a view where larger maps copy; torch refuses "
                     "h, w <= 4",
    "maxpool_ceil": "flatten(1) of a 1x1 pooled map (h = w = 3) is a view where larger maps copy; torch asks "
                    "h//2 != 1 and w//2 != 1 apart, and suggests even sizes from a guard that holds for every h",
    "channels_last_downsample": "flatten(2) of a one-column map (w <= 3) is a view where wider maps copy; torch "
                                "refuses it, and h < 4",
}

# Where both refuse, but graphport's constraint allows sizes torch's does not: graphport
# records the question the program asks of the whole shape; torch.export asks it of each
# dim (or suggests a range narrower than its own guards). Each entry is (why, a spec inside
# graphport's constraint and outside torch's, sizes to check there): graphport must export
# it and match eager at those sizes, torch.export must refuse it.
def _witness(a, h, w, hi):
    return {"x": {0: a.Dim("b", min=1, max=8), 2: a.Dim("h", min=h, max=hi), 3: a.Dim("w", min=w, max=hi)}}


GRAPHPORT_REFUSES_LESS = {
    "unfold_patches": ("transpose asks whether the patch grid is one column (w <= 2); torch also refuses h = 2",
                       lambda a: _witness(a, 2, 3, 128), [(1, 2, 3), (2, 2, 128)]),
}


def _export_both(model, example, spec):
    """(torch.export's error or None, graphport's program or error)."""
    try:
        torch.export.export(model, (example,), dynamic_shapes=spec(torch.export)())
        torch_error = None
    except Exception as e:   # noqa: BLE001 (torch raises several UserError types)
        torch_error = e
    try:
        return torch_error, gp.export(model, (example,), dynamic_shapes=spec(gp)())
    except gp.ConstraintViolationError as e:
        return torch_error, e


def _assert_matches_eager(ep, model, name, shape, sizes):
    for i, size in enumerate(sizes):
        x = _example(name, _input_shape(name, size, shape), seed=i + 1)
        torch.testing.assert_close(ep.module()(x), model(x), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in CASES])
def test_pattern_exports_where_torch_export_does_and_matches_eager(name):
    make, shape, spec, sizes = CASES[name]
    torch.manual_seed(0)
    model = make().eval()
    example = _example(name, shape)
    torch_error, ep = _export_both(model, example, spec)
    if isinstance(ep, Exception):
        assert torch_error is not None, f"torch.export exports {name}; graphport refuses it:\n{ep}"
        _assert_same_constraint(name, ep, torch_error, spec)
        return
    assert (torch_error is None) == (name not in TORCH_EXPORT_ALONE_REFUSES), (
        f"torch.export {'refuses' if torch_error else 'exports'} {name} and graphport exports it: "
        f"TORCH_EXPORT_ALONE_REFUSES must list exactly the patterns torch refuses, with the reason\n"
        f"{torch_error}")
    _assert_matches_eager(ep, model, name, shape, sizes)


def _assert_same_constraint(name, gp_error, torch_error, spec):
    """The sizes graphport's refusal allows are the sizes torch.export's allows: those its
    guards allow, or those its suggested fixes allow (torch's two can disagree: it lists
    `t - 14 != 1` and suggests min=15). When both suggest fixes and torch's agree with its
    own guards, the two fixed specs accept the same sizes."""
    gp_spec, torch_spec = spec(gp)(), spec(torch.export)()
    examples = {next(iter(gp_spec)): CASES[name][1]}
    mine, theirs = read_graphport(gp_error, gp_spec), read_torch(torch_error, gp_spec, torch_spec)
    points = grid(declared_ranges(gp_spec))
    by_guards = differences(points, mine.allows, theirs.allows)
    by_fix = by_guards
    fixes_differ = []
    if theirs.refined is not None:
        torch_fix = lambda p: spec_allows(theirs.refined, gp_spec, p, examples)   # noqa: E731
        by_fix = differences(points, mine.allows, torch_fix)
        if mine.refined is not None and not differences(points, theirs.allows, torch_fix):
            fixes_differ = differences(points, lambda p: spec_allows(mine.refined, gp_spec, p, examples), torch_fix)
    same = (not by_guards or not by_fix) and not fixes_differ
    if name in GRAPHPORT_REFUSES_LESS:
        assert not same, f"{name} is listed in GRAPHPORT_REFUSES_LESS, but both refusals now allow the same sizes"
        assert all("graphport allows" in d for d in by_guards + by_fix), (by_guards, by_fix)
        return
    assert same, (f"{name}: graphport's refusal and torch.export's allow different sizes\n"
                  f"by torch's guards: {by_guards}\nby torch's fixes: {by_fix}\nfixes: {fixes_differ}\n"
                  f"graphport: {[g for g, _ in mine.guards]}\ntorch.export: {[g for g, _ in theirs.guards]}")


@pytest.mark.parametrize("name", sorted(GRAPHPORT_REFUSES_LESS))
def test_where_graphport_refuses_less_than_torch_export_the_sizes_between_are_right(name):
    make, shape, _, _ = CASES[name]
    _, witness, sizes = GRAPHPORT_REFUSES_LESS[name]
    torch.manual_seed(0)
    model = make().eval()
    torch_error, ep = _export_both(model, _example(name, shape), lambda a: lambda: witness(a))
    assert torch_error is not None and not isinstance(ep, Exception), (torch_error, ep)
    _assert_matches_eager(ep, model, name, shape, sizes)


def test_a_guard_on_one_dim_suggests_the_interval_it_allows_and_that_spec_exports():
    """`int(math.ceil(h / 2) * 2) == 32` is no rule's shape (not linear, not a divisibility):
    evaluated over the declared range it allows h in 31..32, which the error suggests, and
    the suggested spec exports and matches eager at both ends."""
    model = CeilToPatches().eval()
    spec = {"x": {1: gp.Dim("h", min=1, max=128)}}
    example = torch.randn(2, 31, 32)
    with pytest.raises(gp.ConstraintViolationError) as refused:
        gp.export(model, (example,), dynamic_shapes=spec)
    assert "h = Dim('h', min=31, max=32)" in str(refused.value)
    ep = gp.export(model, (example,), dynamic_shapes=gp.refine_dynamic_shapes_from_suggested_fixes(
        refused.value.msg, spec))
    for h in (31, 32):
        x = torch.randn(2, h, 32)
        torch.testing.assert_close(ep.module()(x), model(x))
