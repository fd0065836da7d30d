"""ExportedProgram is a record: built by keyword through one verifying constructor, not changed
afterwards, owning its shape environment, and every field of it is either in the artifact or
declared transient (so adding a field means the record, the codec and the schema)."""
from __future__ import annotations

import copy
import dataclasses
import io
import json
import zipfile
from importlib import resources

import pytest
import torch

import graphport as gp
from graphport import _torch
from graphport.program import ExportedProgram
from graphport.serde.symbolic import env_to_json

# Each field the artifact carries, and the top-level key of graphport.json it is written under.
WRITTEN_AS = {
    "graph_module": "graph", "graph_signature": "signature", "state_dict": "state_dict", "constants": "constants",
    "module_call_graph": "module_call_graph", "example_inputs": "example_inputs", "input_paths": "input_paths",
    "input_aliases": "input_aliases", "shape_contract": "shape_contract", "shape_env": "shape_env",
    "shape_report": "shape_report", "verifiers": "dialect",
}
# written only where it differs from its default: a lowered program's dialect
WRITTEN_WHEN_NOT_DEFAULT = {"dialect"}


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("count", torch.zeros(()))
        self.register_buffer("scratch", torch.ones(4), persistent=False)

    def forward(self, x, y):
        self.count.add_(1)
        return self.lin(x) * self.scratch + y.sum(), x.shape[0]


@pytest.fixture(scope="module")
def ep() -> ExportedProgram:
    n = gp.Dim("n", max=64)
    x = torch.randn(5, 4)
    return gp.export(Model(), (x, x), dynamic_shapes=({0: n}, {0: n}))


def _document(program: ExportedProgram) -> dict:
    buffer = io.BytesIO()
    gp.save(program, buffer)
    return json.loads(zipfile.ZipFile(io.BytesIO(buffer.getvalue())).read("graphport.json"))


def _symbolic_envs(program: ExportedProgram) -> set[int]:
    """id() of every shape environment a symbolic size of the graph (or a subgraph) lives in."""
    found = set()
    for module in program.graph_module.modules():
        for node in getattr(module, "graph", None).nodes if isinstance(module, torch.fx.GraphModule) else ():
            for leaf in _torch.pytree.tree_leaves(node.meta.get("val")):
                sizes = [*leaf.shape, *leaf.stride()] if isinstance(leaf, torch.Tensor) else [leaf]
                found |= {id(s.node.env) for s in sizes if isinstance(s, torch.SymInt)}
    return found


def test_every_field_is_written_or_declared_transient(ep):
    fields = dataclasses.fields(ExportedProgram)
    transient = {f.name for f in fields if f.metadata.get("transient")}
    assert {f.name for f in fields} - transient == set(WRITTEN_AS), \
        "a new field is either written by serde/program_json.py (and in schema.json) or marked TRANSIENT"
    doc = _document(ep)
    schema = json.loads(resources.files("graphport.serde").joinpath("schema.json").read_text())
    for key in WRITTEN_AS.values():
        assert key in schema["properties"], key
        if key not in WRITTEN_WHEN_NOT_DEFAULT:
            assert key in doc and key in schema["required"], key
    assert _document(ep.run_decompositions())["dialect"] == "CORE_ATEN"


def test_written_fields_come_back_and_transient_ones_do_not(ep):
    assert ep.input_aliases and ep.shape_contract is not None and ep.constants   # the fields are not empty
    buffer = io.BytesIO()
    gp.save(ep, buffer)
    loaded = gp.load(io.BytesIO(buffer.getvalue()))
    assert loaded.graph_module.code == ep.graph_module.code
    assert loaded.graph_signature == ep.graph_signature and loaded.verifiers == ep.verifiers
    assert loaded.module_call_graph == ep.module_call_graph
    assert loaded.shape_contract.to_json() == ep.shape_contract.to_json()
    assert env_to_json(loaded.shape_env) == env_to_json(ep.shape_env)
    for name in ("input_paths", "input_aliases", "shape_report"):
        assert getattr(loaded, name) == getattr(ep, name), name
    for name in ("state_dict", "constants"):
        ours, theirs = getattr(ep, name), getattr(loaded, name)
        assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours), name
    assert all(torch.equal(a, b) for a, b in zip(_torch.pytree.tree_leaves(ep.example_inputs),
                                                  _torch.pytree.tree_leaves(loaded.example_inputs)))
    for f in dataclasses.fields(ExportedProgram):
        if f.metadata.get("transient"):
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            assert getattr(loaded, f.name) == default, f.name


def test_a_program_is_not_changed_after_it_is_built(ep):
    with pytest.raises(RuntimeError, match="Unable to set ExportedProgram's graph_module attribute") as err:
        ep.graph_module = torch.fx.GraphModule(torch.nn.Module(), torch.fx.Graph())
    assert isinstance(err.value, gp.GraphportError) and "ep.replace(graph_module=" in err.value.fix
    with pytest.raises(RuntimeError):
        del ep.shape_contract
    # torch.export lets example inputs be set; they are checked as torch checks them
    before = ep.example_inputs
    try:
        ep.example_inputs = ((torch.randn(3, 4), torch.randn(3, 4)), {})
        assert ep.example_inputs[0][0].shape == (3, 4)
        with pytest.raises(ValueError, match="Example inputs should be a tuple"):
            ep.example_inputs = [torch.randn(3, 4)]
        with pytest.raises(ValueError, match="structure"):
            ep.example_inputs = ((torch.randn(3, 4),), {})
    finally:
        ep.example_inputs = before


def test_replace_builds_a_verified_program(ep):
    again = ep.replace(shape_report=["a note"])
    assert again is not ep and again.shape_report == ["a note"] and ep.shape_report != ["a note"]
    assert again.graph_module is ep.graph_module
    with pytest.raises(gp.InternalError, match="placeholders must match"):
        ep.replace(graph_signature=dataclasses.replace(ep.graph_signature,
                                                       input_specs=ep.graph_signature.input_specs[1:]))
    with pytest.raises(TypeError):
        ExportedProgram(ep.graph_module, ep.graph_signature, ep.state_dict, ep.module_call_graph)   # keywords only


def test_range_constraints_are_the_contracts(ep):
    assert ep.range_constraints == ep.shape_contract.range_constraints() and ep.range_constraints


def test_each_way_of_making_a_program_gives_it_the_environment_of_its_values(ep):
    assert _symbolic_envs(ep) == {id(ep.shape_env)}
    lowered = ep.run_decompositions()
    assert lowered.shape_env is not ep.shape_env and _symbolic_envs(lowered) == {id(lowered.shape_env)}
    buffer = io.BytesIO()
    gp.save(ep, buffer)
    loaded = gp.load(io.BytesIO(buffer.getvalue()))
    assert _symbolic_envs(loaded) == {id(loaded.shape_env)}
    static = gp.export(Model(), (torch.randn(5, 4), torch.randn(5, 4)))
    assert static.shape_env is None and static.run_decompositions().shape_env is None


def test_run_decompositions_leaves_the_programs_environment_as_it_was():
    """A lowering that assumes more than the capture (a decision proven at smaller sizes by
    tracing again) works in a fork: the program's own environment is not touched."""
    class Norm(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.layer_norm(x, x.shape[-1:]).flatten(0, 1).softmax(-1)

    ep = gp.export(Norm(), (torch.randn(3, 5, 6),), dynamic_shapes=({0: gp.Dim("a"), 1: gp.Dim("b")},))
    env = ep.shape_env
    before = (list(env.guards), dict(env.replacements), dict(env.assumed_min), dict(env.assumption_sites),
              dict(env.proven_min), list(env.unbacked.facts))
    lowered = ep.run_decompositions()
    assert (list(env.guards), dict(env.replacements), dict(env.assumed_min), dict(env.assumption_sites),
            dict(env.proven_min), list(env.unbacked.facts)) == before
    x = torch.randn(2, 3, 6)
    torch.testing.assert_close(lowered.module()(x), Norm()(x))


@pytest.mark.parametrize("exporter", ["graphport", "torch"])
def test_setting_fields_fails_in_torch_exports_words(exporter):
    """docs/errors.md, "torch.export's words": both exporters refuse with the same phrase."""
    export = gp.export if exporter == "graphport" else torch.export.export
    ep = export(torch.nn.Linear(4, 4), (torch.randn(2, 4),))
    with pytest.raises(RuntimeError, match="Unable to set ExportedProgram's graph_module attribute"):
        ep.graph_module = torch.fx.GraphModule(torch.nn.Module(), torch.fx.Graph())
    with pytest.raises(ValueError, match=r"Example inputs should be a tuple containing example arguments \(as a "
                                         r"tuple\), and example kwargs \(as a dictionary\)"):
        ep.example_inputs = [torch.randn(2, 4)]
    ep.example_inputs = ((torch.randn(3, 4),), {})
    assert ep.example_inputs[0][0].shape == (3, 4)


class InputNamedInput(torch.nn.Module):
    """Its placeholder is called like a builtin, which fx's copy of a graph renames."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, input):
        return self.proj(input).relu()


def test_deepcopy_and_device_move_keep_placeholder_names():
    from graphport.passes import move_to_device_pass

    ep = gp.export(InputNamedInput(), (torch.randn(3, 4),), dynamic_shapes=({0: gp.Dim("b", max=8)},))
    for copied in (copy.deepcopy(ep), move_to_device_pass(ep, "cpu")):
        assert [n.name for n in copied.graph.nodes] == [n.name for n in ep.graph.nodes]
        assert copied.graph_module is not ep.graph_module
        for size in (0, 1, 5):
            x = torch.randn(size, 4)
            assert torch.equal(copied.module()(x), ep.module()(x))
