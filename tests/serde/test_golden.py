"""Golden archives written by earlier versions still load, run and give their outputs."""
from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
import torch

import graphport as gp
from graphport.serde.program_json import VERSION
from .helpers import saved

GOLDEN = sorted((Path(__file__).parent / "golden").glob("*.gport"))


def test_goldens_exist():
    written = {p.name.split("_", 2)[2] for p in GOLDEN if p.name.startswith(f"v{VERSION[0]}_{VERSION[1]}_")}
    assert written >= {"static.gport", "dynamic_derived.gport", "buffer_mutation.gport", "data_dependent.gport"}
    assert any(p.name.startswith("v1_0_") for p in GOLDEN)   # the first version's archives stay


@pytest.mark.parametrize("path", GOLDEN, ids=[p.stem for p in GOLDEN])
def test_golden_loads_and_runs(path):
    extra = {"expected.json": ""}
    ep = gp.load(path, extra_files=extra)
    expected = json.loads(extra["expected.json"])
    with zipfile.ZipFile(path) as zf:
        version = json.loads(zf.read("graphport.json"))["version"]
    if tuple(version) == VERSION:   # this version writes its own goldens byte for byte
        assert saved(ep, extra_files={"expected.json": extra["expected.json"]}) == path.read_bytes()
    args, kwargs = ep.example_inputs
    outputs = ep.module()(*[a.clone() for a in args], **kwargs)
    flat = outputs if isinstance(outputs, (tuple, list)) else [outputs]
    got = [o.tolist() if isinstance(o, torch.Tensor) else o for o in flat]
    assert got == expected
