"""Models whose shape checks are floor-division arithmetic that the declared ranges settle."""
import torch
import torch.nn as nn
import torch.nn.functional as F

import graphport as gp


class ConvGroupNorm(nn.Module):
    """A strided Conv1d then a GroupNorm with one channel per group (wav2vec2-style feature
    extractors): group_norm requires batch * frames != 1, frames = samples // 5 - 1."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(1, 4, 10, stride=5)
        self.norm = nn.GroupNorm(4, 4)

    def forward(self, x):
        return self.norm(self.conv(x))


def test_group_norm_after_a_strided_conv_exports_over_the_whole_range():
    model = ConvGroupNorm().eval()
    spec = ({0: gp.Dim("batch", min=1, max=8), 2: gp.Dim("samples", min=15, max=16000)},)
    ep = gp.export(model, (torch.randn(2, 1, 400),), dynamic_shapes=spec)
    for batch, samples in [(2, 400), (1, 15), (1, 16), (3, 999), (8, 16000)]:
        x = torch.randn(batch, 1, samples)
        torch.testing.assert_close(ep.module()(x), model(x))
    # torch.export accepts the same spec
    tspec = ({0: torch.export.Dim("batch", min=1, max=8), 2: torch.export.Dim("samples", min=15, max=16000)},)
    torch.export.export(model, (torch.randn(2, 1, 400),), dynamic_shapes=tspec)


def chunked(x):
    """Mamba-2's chunking: the sequence padded up to a multiple of 256, then split into chunks."""
    b, s, d = x.shape
    x = F.pad(x, (0, 0, 0, (-s) % 256))
    return x.reshape(b, -1, 256, d).sum(2)


def test_padded_chunks_export_at_batch_one():
    """At batch 1 the small-size trace computes the chunk count as (4*padded)//1024, the capture
    as padded//256: one floor division, in one normal form."""
    spec = ({0: gp.Dim("batch", min=1, max=8), 1: gp.Dim("seq", min=1, max=1024)},)
    ep = gp.export(chunked, (torch.randn(2, 300, 4),), dynamic_shapes=spec)
    for batch, seq in [(2, 300), (1, 1), (1, 256), (1, 257), (3, 1024), (8, 511)]:
        x = torch.randn(batch, seq, 4)
        torch.testing.assert_close(ep.module()(x), chunked(x))

