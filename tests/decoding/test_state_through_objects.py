"""A module's buffer reached through another Python object (as transformers' StaticCache holds
the tensors its wrapper registers as buffers) is the buffer: reads see its current value, and
in-place writes become BUFFER_MUTATION outputs that ep.module() applies.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import graphport as gp


class Holder:
    """A plain object keeping a reference to a tensor, outside any module attribute."""

    def __init__(self, tensor: torch.Tensor):
        self.tensor = tensor


class Counter(nn.Module):
    def __init__(self, register: bool = True):
        super().__init__()
        slots = torch.zeros(4, 3)
        if register:
            self.register_buffer("slots", slots)
        self.holder = Holder(slots)

    def forward(self, x, position):
        self.holder.tensor.index_copy_(0, position, x)   # written through the holder
        self.holder.tensor[position] += 1.0
        return self.holder.tensor.sum(0) * 2


def test_writes_through_another_object_are_buffer_mutations_applied_by_module():
    model = Counter()
    ep = gp.export(model, (torch.randn(1, 3), torch.tensor([1])))
    assert not model.slots.any()   # export leaves the buffer as it was
    kinds = [(s.kind, s.target) for s in ep.graph_signature.output_specs]
    assert kinds == [(gp.OutputKind.BUFFER_MUTATION, "slots"), (gp.OutputKind.USER_OUTPUT, None)]
    program, reference = ep.module(), Counter()
    for position in (1, 3, 1):
        x = torch.randn(1, 3)
        torch.testing.assert_close(program(x, torch.tensor([position])), reference(x, torch.tensor([position])))
    torch.testing.assert_close(program.slots, reference.slots)


class Overwrite(nn.Module):
    def __init__(self):
        super().__init__()
        self.holder = Holder(torch.zeros(4, 3))

    def forward(self, x, position):
        self.holder.tensor.copy_(x.expand(4, 3))
        return x + 1


@pytest.mark.parametrize("model", [Counter(register=False), Overwrite()], ids=["index_copy_", "copy_"])
def test_a_write_into_a_tensor_that_is_no_buffer_is_refused_with_a_fix(model):
    with pytest.raises(gp.errors.UnsupportedFeatureError, match="register the tensor as a buffer") as info:
        gp.export(model, (torch.randn(1, 3), torch.tensor([1])))
    assert "test_state_through_objects.py" in str(info.value)
