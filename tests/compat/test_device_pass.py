"""`move_to_device_pass`: the same user code against torch.export.passes.move_to_device_pass and
graphport.passes.move_to_device_pass. The moved program keeps its graph, signature and ranges;
its state, constants, device arguments and node values report the new device; it computes
what eager computes (CPU to CPU) or eager's shapes and dtypes on the new device (to meta)."""
from __future__ import annotations

import pytest
import torch

import graphport as gp
from graphport.passes import move_to_device_pass

from tests.soundness import assert_same


class Factories(torch.nn.Module):
    """State of every kind, tied weights, factories with `device=`, and a `.to` whose device
    the program names."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Linear(4, 4)
        self.head = torch.nn.Linear(4, 4)
        self.head.weight = self.emb.weight
        self.bn = torch.nn.BatchNorm1d(4)
        self.register_buffer("scratch", torch.ones(4), persistent=False)
        self.table = torch.tensor([1.0, 2.0, 3.0, 4.0])

    def forward(self, x):
        ramp = torch.arange(4, device="cpu", dtype=torch.float32)
        zeros = torch.zeros(x.shape[0], 4, device=x.device)
        y = self.bn(self.head(self.emb(x))) + ramp + zeros + self.scratch * self.table
        return y.to("cpu", torch.float64).sum(1), torch.full((2,), 3.0, device="cpu")


class Branchy(torch.nn.Module):
    """A device argument inside a cond branch moves too."""

    def forward(self, x):
        def true_fn(x):
            return x + torch.ones(x.shape, device="cpu")

        def false_fn(x):
            return x - 1

        return torch.cond(x.shape[0] > 2, true_fn, false_fn, (x,))


def _export(ex, model, x, dynamic):
    shapes = {"x": {0: ex.Dim("b", min=1, max=16)}} if dynamic else None
    return ex.export(model.eval(), (x,), dynamic_shapes=shapes)


def _devices(ep) -> dict[str, set]:
    """Every device the program names: its state, its constants, its operators' arguments,
    its nodes' values (subgraphs included)."""
    found = {"state": {t.device for t in ep.state_dict.values()},
             "constants": {t.device for t in ep.constants.values() if isinstance(t, torch.Tensor)},
             "arguments": set(), "values": set()}
    for gm in ep.graph_module.modules():
        if not isinstance(gm, torch.fx.GraphModule):
            continue
        for node in gm.graph.nodes:
            for leaf in torch.utils._pytree.tree_leaves((node.args, node.kwargs)):
                if isinstance(leaf, torch.device):
                    found["arguments"].add(leaf)
            for leaf in torch.utils._pytree.tree_leaves(node.meta.get("val")):
                if isinstance(leaf, torch.Tensor):
                    found["values"].add(leaf.device)
    return found


@pytest.mark.parametrize("dynamic", [False, True])
def test_cpu_to_meta_moves_every_device(ex, dynamic):
    model, x = Factories(), torch.randn(3, 4)
    moved = ex.move_to_device_pass(_export(ex, model, x, dynamic), "meta")
    meta = torch.device("meta")
    found = _devices(moved)
    assert set().union(*found.values()) == {meta} and found["state"] and found["values"]
    assert all(isinstance(p, torch.nn.Parameter) for p in moved.parameters())
    for rows in ([3, 5] if dynamic else [3]):
        want = model(torch.randn(rows, 4))
        got = moved.module()(torch.randn(rows, 4, device="meta"))
        for g, w in zip(got, want):
            assert (g.device, g.shape, g.dtype) == (meta, w.shape, w.dtype)


@pytest.mark.parametrize("dynamic", [False, True])
def test_cpu_to_cpu_computes_what_eager_does(ex, dynamic):
    model, x = Factories(), torch.randn(3, 4)
    moved = ex.move_to_device_pass(_export(ex, model, x, dynamic), torch.device("cpu"))
    for rows in ([3, 1, 7, 16] if dynamic else [3]):
        fresh = torch.randn(rows, 4)
        assert_same(moved.module()(fresh), model(fresh), exact=False)


def test_a_dict_moves_only_the_devices_it_names(ex):
    model, x = Factories(), torch.randn(3, 4)
    untouched = ex.move_to_device_pass(_export(ex, model, x, True), {"cuda:0": "meta"})
    assert set().union(*_devices(untouched).values()) == {torch.device("cpu")}
    moved = ex.move_to_device_pass(_export(ex, model, x, True), {"cpu": "meta"})
    assert set().union(*_devices(moved).values()) == {torch.device("meta")}


def test_device_arguments_in_a_cond_branch_move(ex):
    model, x = Branchy(), torch.randn(4, 3)
    ep = ex.export(model, (x,), dynamic_shapes={"x": {0: ex.Dim("b", min=1, max=8)}})
    moved = ex.move_to_device_pass(ep, "meta")
    assert set().union(*_devices(moved).values()) == {torch.device("meta")}
    assert moved.module()(torch.randn(5, 3, device="meta")).device.type == "meta"


def test_graphport_leaves_the_given_program_as_it_was():
    """torch moves the program in place and returns it; graphport returns a new one."""
    model, x = Factories(), torch.randn(3, 4)
    ep = gp.export(model.eval(), (x,), dynamic_shapes={"x": {0: gp.Dim("b", min=1, max=16)}})
    before = _devices(ep)
    moved = move_to_device_pass(ep, "meta")
    assert moved is not ep and _devices(ep) == before
    assert_same(ep.module()(x), model(x), exact=False)
    assert [n.name for n in moved.graph.nodes] == [n.name for n in ep.graph.nodes]
    assert moved.range_constraints == ep.range_constraints
    assert moved.example_inputs[0][0].device.type == "meta"


def test_a_moved_program_still_refuses_what_the_original_refuses():
    ep = gp.export(Factories().eval(), (torch.randn(3, 4),), dynamic_shapes={"x": {0: gp.Dim("b", min=1, max=16)}})
    moved = move_to_device_pass(ep, "meta")
    with pytest.raises(gp.InputGuardError):
        moved.module()(torch.randn(17, 4, device="meta"))


def test_a_moved_program_saves_and_loads(tmp_path):
    model, x = Factories(), torch.randn(3, 4)
    ep = gp.export(model.eval(), (x,), dynamic_shapes={"x": {0: gp.Dim("b", min=1, max=16)}})
    moved = move_to_device_pass(ep, {"cpu": "cpu"})
    gp.save(moved, tmp_path / "moved.gport")
    again = gp.load(tmp_path / "moved.gport")
    fresh = torch.randn(6, 4)
    assert_same(again.module()(fresh), model(fresh), exact=False)
