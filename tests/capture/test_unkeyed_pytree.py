"""Container types registered with pytree without a flatten_with_keys_fn (as diffusers registers its
outputs): they flatten by position, in inputs and outputs, and survive save/load and the converter."""
import pytest
import torch
import torch.nn as nn
from torch.utils import _pytree as pytree

import graphport as gp
from graphport.interop import to_torch


class Pair:
    """A container with two tensors and no keyed flatten."""

    def __init__(self, first, second):
        self.first, self.second = first, second


@pytest.fixture
def pair_registered():
    pytree.register_pytree_node(Pair, lambda p: ([p.first, p.second], None), lambda values, _: Pair(*values),
                                serialized_type_name="tests.capture.Pair")
    yield
    pytree._deregister_pytree_node(Pair)


class Swap(nn.Module):
    def forward(self, pair):
        return Pair(pair.second * 2, pair.first + 1)


def _assert_pair_close(got, expected):
    assert isinstance(got, Pair)
    torch.testing.assert_close(got.first, expected.first)
    torch.testing.assert_close(got.second, expected.second)


def test_unkeyed_container_in_inputs_and_outputs(pair_registered, tmp_path):
    example = Pair(torch.randn(3, 4), torch.randn(3, 5))
    batch = gp.Dim("batch", max=16)
    ep = gp.export(Swap(), (example,), dynamic_shapes=([{0: batch}, {0: batch}],))
    # leaves without keys are named by their position in the container
    assert [s.arg.name for s in ep.graph_signature.input_specs] == ["pair_0", "pair_1"]
    for size in (1, 3, 7):
        fresh = Pair(torch.randn(size, 4), torch.randn(size, 5))
        _assert_pair_close(ep.module()(fresh), Swap()(fresh))
    gp.save(ep, tmp_path / "pair.gport")
    _assert_pair_close(gp.load(tmp_path / "pair.gport").module()(example), Swap()(example))


class Split(nn.Module):
    def forward(self, x):
        return Pair(x[:, :2] * 2, x[:, 2:] + 1)


def test_unkeyed_container_output_converts_to_torch_export(pair_registered):
    # torch.export's own module() flattens its inputs with keys, so only outputs are converted here
    x = torch.randn(3, 5)
    ep = gp.export(Split(), (x,), dynamic_shapes=({0: gp.Dim("batch", max=16)},))
    converted = to_torch(ep).module()
    for size in (1, 3, 7):
        fresh = torch.randn(size, 5)
        _assert_pair_close(converted(fresh), Split()(fresh))
