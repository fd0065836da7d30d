"""Views of a split, read after their base was written, are recomputed with getitem."""
import torch

import graphport as gp


def test_split_view_reused_after_its_base_is_written():
    def f(x):
        y = x.clone()
        a, b = y.split(2)
        y.add_(1)
        return a * 2, b
    x = torch.randn(4, 3)
    ep = gp.export(f, (x,))
    for got, want in zip(ep.module()(x), f(x)):
        torch.testing.assert_close(got, want)


def test_unbind_view_written_through_updates_the_base():
    def f(x):
        y = x.clone()
        rows = y.unbind(0)
        rows[1].mul_(10)
        return y, rows[0] + 1
    x = torch.randn(3, 2)
    ep = gp.export(f, (x,))
    for got, want in zip(ep.module()(x), f(x)):
        torch.testing.assert_close(got, want)
