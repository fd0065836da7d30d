"""KV caches of the user's own classes, registered with torch's pytree: flattened as torch
flattens them, specified in dynamic_shapes as torch.export matches them, never left holding
capture values, and written in place through USER_INPUT_MUTATION outputs.
"""
from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn as nn
import torch.utils._pytree as pytree

import graphport as gp

HEADS, DIM = 2, 4


class GrowingCache:
    """Per layer, a key and a value tensor that grow along dim 1 (like DynamicCache)."""

    def __init__(self, keys: list, values: list):
        self.keys, self.values = keys, values

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        if layer == len(self.keys):   # a Python-level change of the container during the call
            self.keys.append(k)
            self.values.append(v)
        else:
            self.keys[layer] = torch.cat([self.keys[layer], k], dim=1)
            self.values[layer] = torch.cat([self.values[layer], v], dim=1)
        return self.keys[layer], self.values[layer]


pytree.register_pytree_node(
    GrowingCache,
    lambda c: ([c.keys, c.values], None),
    lambda children, _: GrowingCache(list(children[0]), list(children[1])),
    serialized_type_name="tests.decoding.GrowingCache",
    flatten_with_keys_fn=lambda c: ([(pytree.GetAttrKey("keys"), c.keys), (pytree.GetAttrKey("values"), c.values)],
                                    None),
)


@dataclasses.dataclass
class SlotCache:
    """Preallocated key/value slots written in place at `position` (like StaticCache)."""
    keys: torch.Tensor
    values: torch.Tensor


gp.register_dataclass(SlotCache, serialized_type_name="tests.decoding.SlotCache")


class Attention(nn.Module):
    def __init__(self, layers: int = 2):
        super().__init__()
        self.proj = nn.ModuleList(nn.Linear(DIM, 3 * DIM) for _ in range(layers))

    def attend(self, layer, x):
        q, k, v = self.proj[layer](x).chunk(3, dim=-1)
        return q, k, v

    def forward(self, x, cache: GrowingCache):
        for layer in range(len(self.proj)):
            q, k, v = self.attend(layer, x)
            k, v = cache.append(layer, k, v)
            x = x + torch.softmax(q @ k.transpose(1, 2), dim=-1) @ v
        return x, cache


class SlotAttention(Attention):
    def forward(self, x, cache: SlotCache, position: torch.Tensor):
        q, k, v = self.attend(0, x)
        cache.keys.index_copy_(1, position, k)
        cache.values[:, position] = v   # slice assignment: index_put_
        return torch.softmax(q @ cache.keys.transpose(1, 2), dim=-1) @ cache.values


def growing(batch: int, past: int, layers: int = 2) -> GrowingCache:
    return GrowingCache([torch.randn(batch, past, DIM) for _ in range(layers)],
                        [torch.randn(batch, past, DIM) for _ in range(layers)])


def copy_of(cache: GrowingCache) -> GrowingCache:
    return GrowingCache([k.clone() for k in cache.keys], [v.clone() for v in cache.values])


def growing_spec(dim=gp.Dim) -> dict:
    batch, past = dim("batch", min=1, max=16), dim("past", min=1, max=64)
    per_layer = [{0: batch, 1: past}] * 2
    return {"x": {0: batch}, "cache": [per_layer, per_layer]}   # the class as the list of its children


def test_a_registered_cache_flattens_as_torch_flattens_it_and_is_returned_as_its_class():
    model, x, cache = Attention(), torch.randn(3, 1, DIM), growing(3, 5)
    ep = gp.export(model, (x, cache), dynamic_shapes=growing_spec())
    names = [s.arg.name for s in ep.graph_signature.input_specs if s.kind is gp.InputKind.USER_INPUT]
    assert names == ["x", "cache_keys_0", "cache_keys_1", "cache_values_0", "cache_values_1"]
    for batch, past in [(3, 5), (1, 9), (4, 1)]:
        x, cache = torch.randn(batch, 1, DIM), growing(batch, past)
        expected_out, expected_cache = model(x, copy_of(cache))
        got_out, got_cache = ep.module()(x, cache)
        assert type(got_cache) is GrowingCache
        torch.testing.assert_close(got_out, expected_out)
        for g, e in zip(got_cache.keys + got_cache.values, expected_cache.keys + expected_cache.values):
            assert g.shape == (batch, past + 1, DIM)
            torch.testing.assert_close(g, e)


def test_the_same_spec_exports_with_torch_export_and_agrees():
    model, x, cache = Attention(), torch.randn(3, 1, DIM), growing(3, 5)
    ours = gp.export(model, (x, cache), dynamic_shapes=growing_spec())
    theirs = torch.export.export(model, (x, copy_of(cache)), dynamic_shapes=growing_spec(torch.export.Dim))
    assert ours.call_spec.in_spec == theirs.call_spec.in_spec
    assert ours.call_spec.out_spec == theirs.call_spec.out_spec
    x, cache = torch.randn(2, 1, DIM), growing(2, 7)
    for g, e in zip(pytree.tree_leaves(ours.module()(x, cache)), pytree.tree_leaves(theirs.module()(x, cache))):
        torch.testing.assert_close(g, e)


def test_python_changes_to_an_input_container_do_not_reach_the_callers_object():
    """The first layer is appended to the (empty) cache during the call."""
    model, x = Attention(), torch.randn(2, 3, DIM)
    cache = GrowingCache([], [])
    ep = gp.export(model, (x, cache))
    assert cache.keys == [] and cache.values == []
    _, got = ep.module()(x, cache)
    _, expected = model(x, GrowingCache([], []))
    assert cache.keys == [] and len(got.keys) == 2
    for g, e in zip(got.keys + got.values, expected.keys + expected.values):
        torch.testing.assert_close(g, e)


def test_a_failed_capture_leaves_the_callers_cache_as_it_was():
    class Fails(Attention):
        def forward(self, x, cache):
            super().forward(x, cache)
            if x.sum() > 0:   # data-dependent branch: the capture fails after the cache was changed
                return x
            return -x

    cache = growing(2, 3)
    keys = list(cache.keys)
    with pytest.raises(gp.errors.GraphportError):
        gp.export(Fails(), (torch.randn(2, 1, DIM), cache))
    assert all(a is b for a, b in zip(cache.keys, keys)) and len(cache.keys) == 2
    assert all(type(k) is torch.Tensor for k in cache.keys + cache.values)


def test_a_spec_list_of_the_wrong_length_for_a_registered_cache_is_refused():
    spec = growing_spec()
    spec["cache"] = spec["cache"][:1]
    with pytest.raises(gp.errors.UnsupportedInputError, match="the spec lists 1 entries for a registered container with 2 children"):
        gp.export(Attention(), (torch.randn(3, 1, DIM), growing(3, 5)), dynamic_shapes=spec)


def slot_inputs(batch: int = 2, slots: int = 8):
    return (torch.randn(batch, 1, DIM), SlotCache(torch.zeros(batch, slots, DIM), torch.zeros(batch, slots, DIM)),
            torch.tensor([3]))


@pytest.mark.parametrize("spec_form", ["list", "fields"])
def test_in_place_writes_into_a_cache_input_are_user_input_mutations_applied_by_module(spec_form):
    batch = gp.Dim("batch", min=2, max=16)   # graphport finds index_put recorded differently at batch 1
    per_tensor = {0: batch}
    cache_spec = [per_tensor, per_tensor] if spec_form == "list" else {"keys": per_tensor, "values": per_tensor}
    model = SlotAttention(layers=1)
    ep = gp.export(model, slot_inputs(), dynamic_shapes=({0: batch}, cache_spec, None))
    mutated = [s.target for s in ep.graph_signature.output_specs if s.kind is gp.OutputKind.USER_INPUT_MUTATION]
    assert mutated == ["cache_keys", "cache_values"]
    for b in (2, 3, 5):
        x, cache, position = slot_inputs(b)
        eager_cache = SlotCache(cache.keys.clone(), cache.values.clone())
        expected = model(x, eager_cache, position)
        got = ep.module()(x, cache, position)
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(cache.keys, eager_cache.keys)   # the caller's tensors are updated
        torch.testing.assert_close(cache.values, eager_cache.values)
        assert cache.keys[:, 3].abs().sum() > 0


def test_cache_input_mutations_match_torch_export_and_survive_save_load(tmp_path):
    model = SlotAttention(layers=1)
    ours = gp.export(model, slot_inputs())
    theirs = torch.export.export(model, slot_inputs()).run_decompositions({})   # functional, as graphport's
    assert [(s.kind.name, s.target) for s in ours.graph_signature.output_specs] == \
        [(s.kind.name, s.target) for s in theirs.graph_signature.output_specs]
    gp.save(ours, tmp_path / "slots.gport")
    loaded = gp.load(tmp_path / "slots.gport")
    x, cache, position = slot_inputs()
    torch_cache = SlotCache(cache.keys.clone(), cache.values.clone())
    torch.testing.assert_close(loaded.module()(x, cache, position), theirs.module()(x, torch_cache, position))
    torch.testing.assert_close(cache.keys, torch_cache.keys)
    torch.testing.assert_close(cache.values, torch_cache.values)
