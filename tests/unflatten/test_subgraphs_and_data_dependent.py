"""Unflattening what other stages add: a cond inside a submodule, a data-dependent size inside
another, a weight tied between two modules."""
from __future__ import annotations

import pytest
import torch

import graphport as gp


class Gate(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)

    def forward(self, x):
        return gp.cond(x.sum() > 0, lambda x: self.a(x), lambda x: self.b(x).relu(), (x,))


class Pick(torch.nn.Module):
    def forward(self, x, n):
        k = n.item()
        torch._check(k >= 0)
        torch._check(k <= x.shape[0])
        return x[:k] * 2


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gate, self.pick, self.out = Gate(), Pick(), torch.nn.Linear(4, 2)

    def forward(self, x, n):
        return self.out(self.pick(self.gate(x), n))


def test_cond_and_item_inside_submodules_unflatten_and_match_eager():
    model = Net().eval()
    unflat = gp.unflatten(gp.export(model, (torch.randn(6, 4), torch.tensor(3))))
    assert (type(unflat.gate).__name__, type(unflat.pick).__name__) == ("Gate", "Pick")
    for sign in (1.0, -1.0):           # both branches
        for k in (0, 2, 6):            # data-dependent sizes across the stated range, 0 included
            x = sign * (torch.rand(6, 4) + 0.1)
            torch.testing.assert_close(unflat(x, torch.tensor(k)), model(x, torch.tensor(k)))
    with pytest.raises(RuntimeError):  # the stated check still holds
        unflat(torch.rand(6, 4), torch.tensor(7))


class Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed, self.head = torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids):
        return self.head(self.embed(ids))


def test_a_tied_weight_is_one_tensor_under_both_names():
    model = Tied()
    unflat = gp.unflatten(gp.export(model, (torch.tensor([[1, 2, 3]]),)))
    assert unflat.state_dict().keys() == model.state_dict().keys()
    assert unflat.head.weight is unflat.embed.weight
    ids = torch.tensor([[4, 5, 9]])
    torch.testing.assert_close(unflat(ids), model(ids))
