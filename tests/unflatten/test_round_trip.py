"""export(unflatten(ep)) gives the same program; every zoo model unflattens with its
hierarchy and matches eager; a real transformer's preserved attention is swapped."""
from __future__ import annotations

import copy
import os
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

import graphport as gp

from .helpers import assert_close, paths
from .test_hierarchy import CalledOnOtherShapes, ForeignParameter, Nested, Shared
from .test_preserve import DYNAMIC, PRESERVE, Transformer, inputs

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # bench/ lives at the repo root
from bench import measure, zoo  # noqa: E402

slow = [pytest.mark.slow, pytest.mark.skipif(os.environ.get("GRAPHPORT_SLOW") != "1",
                                             reason="slow: set GRAPHPORT_SLOW=1 (make test-all) to run")]


def operators(ep) -> Counter:
    return Counter(str(n.target) for n in ep.graph.nodes if n.op == "call_function")


def assert_same_program(ep, again) -> None:
    assert operators(again) == operators(ep)
    assert str(again.graph_signature) == str(ep.graph_signature)
    assert list(again.state_dict) == list(ep.state_dict) and list(again.constants) == list(ep.constants)
    assert again.range_constraints.keys() == ep.range_constraints.keys()
    assert [str(r) for r in again.range_constraints.values()] == [str(r) for r in ep.range_constraints.values()]


def named_state(model: torch.nn.Module) -> set[str]:
    """Parameter and buffer names, each tensor once (a tied weight under its first name, as
    named_parameters() lists it)."""
    return {n for n, _ in model.named_parameters()} | {n for n, _ in model.named_buffers()}


@pytest.mark.parametrize("make", [Nested, Shared, ForeignParameter, CalledOnOtherShapes])
def test_round_trip_gives_the_same_program(make):
    torch.manual_seed(0)
    args = (torch.randn(3, 4),)
    ep = gp.export(make(), args)
    assert_same_program(ep, gp.export(gp.unflatten(ep), args))


def test_round_trip_of_a_dynamic_program_with_preserved_signatures():
    torch.manual_seed(0)
    ep = gp.export(Transformer().eval(), inputs(), dynamic_shapes=DYNAMIC, preserve_module_call_signature=PRESERVE)
    again = gp.export(gp.unflatten(ep), inputs(), dynamic_shapes=DYNAMIC, preserve_module_call_signature=PRESERVE)
    assert_same_program(ep, again)
    ours = {e.fqn: e.signature for e in again.module_call_graph if e.signature is not None}
    assert {fqn: (s.in_spec, s.out_spec) for fqn, s in ours.items()} == \
        {e.fqn: (e.signature.in_spec, e.signature.out_spec) for e in ep.module_call_graph if e.signature is not None}


def _zoo_params() -> list:
    return [pytest.param(name, kind, marks=[] if name in zoo.CI_SUBSET and kind == "static" else slow,
                         id=f"{name}-{kind}")
            for name, entry in zoo.MODELS.items() if not entry.meta for kind in ("static", "dynamic")]


@pytest.mark.parametrize("name,kind", _zoo_params())
def test_zoo_model_unflattens_matches_eager_and_round_trips(name, kind):
    built = zoo.MODELS[name].build()
    model = built.module
    args, kwargs = built.example_inputs()
    spec = measure.dynamic_spec(built, "graphport") if kind == "dynamic" else None
    ep = gp.export(copy.deepcopy(model), args, kwargs, dynamic_shapes=spec)
    unflat = gp.unflatten(ep)
    assert paths(unflat, copies=False) == paths(model)
    assert named_state(unflat) == named_state(model)
    for name_, module in unflat.named_modules():
        if name_ and getattr(module, "graph", None) is not None and "@" not in name_:
            assert type(module).__name__ == type(model.get_submodule(name_)).__name__
    with torch.no_grad():
        assert_close(unflat(*args, **kwargs), model(*args, **kwargs))
        if kind == "dynamic":
            other_args, other_kwargs = built.other_inputs()
            assert_close(unflat(*other_args, **other_kwargs), model(*other_args, **other_kwargs))
    assert_same_program(ep, gp.export(unflat, args, kwargs, dynamic_shapes=spec))


@pytest.mark.parametrize("name", [pytest.param("llama", marks=slow), "bert"])
def test_transformers_attention_preserved_and_swapped(name):
    built = zoo.MODELS[name].build()
    model = built.module
    args, kwargs = built.example_inputs()
    attention = next(n for n, m in model.named_modules() if type(m).__name__.endswith("Attention"))
    ep = gp.export(copy.deepcopy(model), args, kwargs, preserve_module_call_signature=(attention,))
    unflat = gp.unflatten(ep)
    with torch.no_grad():
        expected = model(*args, **kwargs)
        assert_close(unflat(*args, **kwargs), expected)
        unflat.set_submodule(attention, copy.deepcopy(model.get_submodule(attention)))   # the eager original
        assert_close(unflat(*args, **kwargs), expected)
