"""unflatten(ep): the original hierarchy, state at its names, and ep.module()'s results,
compared with eager and with torch.export's unflatten on the hard cases."""
from __future__ import annotations

import collections
import copy

import pytest
import torch
from torch import nn

import graphport as gp

from .helpers import assert_close, check_unflatten, paths


class Counter(nn.Module):
    """Counts its calls in a buffer, and adds the count: a buffer mutated inside a submodule."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("calls", torch.zeros(4))

    def forward(self, x):
        self.calls.add_(1)
        return self.lin(x) + self.calls


class Nested(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 4))
        self.norm = nn.LayerNorm(4)

    def forward(self, x):
        return self.norm(self.block(x)) * 2


def test_nested_hierarchy_paths_types_and_state():
    ep, unflat = check_unflatten(Nested(), (torch.randn(3, 4),), fresh=[((torch.randn(3, 4),), {})])
    assert type(unflat.block).__name__ == "Sequential" and type(unflat.block[0]).__name__ == "Linear"
    assert unflat.block[2].weight is ep.state_dict["block.2.weight"]   # the program's tensors, not copies
    assert any(n.op == "call_module" and n.target == "block" for n in unflat.graph.nodes)


class CalledTwice(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(torch.relu(self.lin(x)))


def test_submodule_called_twice_identically_is_one_module_called_twice():
    _, unflat = check_unflatten(CalledTwice(), (torch.randn(2, 4),))
    calls = [n.target for n in unflat.graph.nodes if n.op == "call_module"]
    assert calls == ["lin", "lin"] and paths(unflat) == {"", "lin"}


class CalledOnOtherShapes(nn.Module):
    def __init__(self):
        super().__init__()
        self.counter = Counter()

    def forward(self, x):
        y = self.counter(x)
        return self.counter(y[:2]), y


def test_submodule_called_twice_differently_gets_a_copy_sharing_state():
    model = CalledOnOtherShapes()
    _, unflat = check_unflatten(model, (torch.randn(3, 4),))
    assert "counter@1" in paths(unflat)
    copy_, first = unflat.get_submodule("counter@1"), unflat.counter
    assert copy_.lin.weight is first.lin.weight and copy_.calls is first.calls   # shared, not duplicated
    assert [n for n, _ in unflat.named_parameters()] == ["counter.lin.weight", "counter.lin.bias"]


class Shared(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = Counter()
        self.b = self.a
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.b(self.a(x)))


def test_shared_submodule_is_one_object_at_both_paths():
    _, unflat = check_unflatten(Shared(), (torch.randn(2, 4),))
    assert unflat.a is unflat.b
    assert [n for n, _ in unflat.named_parameters()] == ["a.lin.weight", "a.lin.bias", "head.weight", "head.bias"]


def test_buffer_mutation_inside_a_submodule_updates_the_buffer_at_its_name():
    model = nn.Sequential(Counter(), nn.ReLU())
    _, unflat = check_unflatten(model, (torch.randn(2, 4),), fresh=[((torch.randn(2, 4),), {})] * 2)
    assert torch.equal(unflat[0].calls, torch.full((4,), 3.0))   # one call in export, three here
    writes = [n for n in unflat[0].graph.nodes if n.target is torch.ops.aten.copy_.default]
    assert len(writes) == 1   # written where it changes, inside the submodule


class ReadsAfterWrite(nn.Module):
    """The old value of a buffer is read after the write: the root writes it back at the end."""

    def __init__(self):
        super().__init__()
        self.inner = Counter()

    def forward(self, x):
        old = self.inner.calls * 1
        y = self.inner(x)
        return y + old


def test_buffer_mutation_with_old_value_read_first():
    check_unflatten(ReadsAfterWrite(), (torch.randn(2, 4),), fresh=[((torch.randn(2, 4),), {})])


class ForeignParameter(nn.Module):
    """Parameters used outside the module that owns them, in the root and in a sibling."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(4, 4)
        self.dec = Tied(self.enc)

    def forward(self, x):
        return self.dec(self.enc(x)) + self.enc.bias.sum()


class Tied(nn.Module):
    def __init__(self, enc: nn.Linear):
        super().__init__()
        self.__dict__["enc"] = enc    # not a submodule: its weight is used from outside its owner
        self.scale = nn.Parameter(torch.ones(4))

    def forward(self, x):
        return torch.nn.functional.linear(x, self.enc.weight.t()) * self.scale


def test_parameters_used_outside_their_owner():
    _, unflat = check_unflatten(ForeignParameter(), (torch.randn(2, 4),))
    dec_inputs = [n for n in unflat.dec.graph.nodes if n.op == "placeholder"]
    assert len(dec_inputs) == 2   # x and enc.weight, handed in by the root


Pair = collections.namedtuple("Pair", ["first", "second"])


class Containers(nn.Module):
    def __init__(self):
        super().__init__()
        self.split = Splitter()
        self.out = nn.Linear(4, 4)

    def forward(self, x):
        parts = self.split(x)
        return {"sum": self.out(parts["a"][0] + parts["b"].second), "pair": parts["b"]}


class Splitter(nn.Module):
    def forward(self, x):
        return {"a": [x * 2, x - 1], "b": Pair(x.sin(), x.cos())}


def test_submodule_returning_containers():
    check_unflatten(Containers(), (torch.randn(2, 4),))


def test_dynamic_program_unflattens_and_runs_at_other_sizes():
    batch = gp.Dim("batch", min=1, max=64)
    check_unflatten(Nested(), (torch.randn(3, 4),), dynamic_shapes=({0: batch},),
                    fresh=[((torch.randn(1, 4),), {}), ((torch.randn(17, 4),), {})])


def test_inputs_are_checked_like_ep_module():
    unflat = gp.unflatten(gp.export(Nested(), (torch.randn(3, 4),)))
    with pytest.raises(gp.InputGuardError, match="size 5 at dimension 0"):
        unflat(torch.randn(5, 4))
    with pytest.raises(gp.InputStructureError):
        unflat(torch.randn(3, 4), torch.randn(3, 4))


def test_user_input_mutation_is_written_back():
    class Scale(nn.Module):
        def forward(self, x):
            x.mul_(2)
            return x + 1

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = Scale()

        def forward(self, x):
            return self.scale(x)

    unflat = gp.unflatten(gp.export(Outer(), (torch.randn(3),)))
    x = torch.ones(3)
    assert_close(unflat(x), torch.full((3,), 3.0))
    assert torch.equal(x, torch.full((3,), 2.0))


def test_function_export_unflattens_to_a_flat_module():
    unflat = gp.unflatten(gp.export(lambda x: x.sin() + 1, (torch.randn(3),)))
    x = torch.randn(3)
    assert_close(unflat(x), x.sin() + 1)
    assert paths(unflat) == {""}


def test_module_that_ran_nothing_says_so():
    class Holder(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            return x @ self.lin.weight

    unflat = gp.unflatten(gp.export(Holder(), (torch.randn(2, 4),)))
    with pytest.raises(gp.UnsupportedFeatureError, match="ran no operation"):
        unflat.lin(torch.randn(2, 4))


class CallsSibling(nn.Module):
    """A module calling a module outside its own subtree (a plain reference to a sibling)."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(4, 4)
        self.dec = UsesSibling(self.enc)

    def forward(self, x):
        return self.dec(x)


class UsesSibling(nn.Module):
    def __init__(self, enc: nn.Linear):
        super().__init__()
        self.__dict__["enc"] = enc
        self.out = nn.Linear(4, 2)

    def forward(self, x):
        return self.out(self.enc(x).relu())


def test_module_calling_a_sibling_it_does_not_own():
    _, unflat = check_unflatten(CallsSibling(), (torch.randn(2, 4),))
    targets = [n.target for n in unflat.dec.graph.nodes if n.op == "call_module"]
    assert targets == ["enc", "out"]


def test_deepcopy_gives_an_independent_module():
    model = nn.Sequential(Counter(), nn.ReLU())
    unflat = gp.unflatten(gp.export(copy.deepcopy(model), (torch.randn(2, 4),)))
    twin = copy.deepcopy(unflat)
    x = torch.randn(2, 4)
    assert_close(twin(x), model(x))
    assert torch.equal(twin[0].calls, torch.ones(4)) and torch.equal(unflat[0].calls, torch.zeros(4))
