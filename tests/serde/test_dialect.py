"""A program's dialect survives save/load: a lowered program loads as lowered, checked by
the same verifier; archives without the key (exported programs, older files) load as TRAINING."""
from __future__ import annotations

import io
import json
import zipfile

import pytest
import torch

import graphport as gp
from .helpers import saved


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x):
        return torch.nn.functional.silu(self.lin(x))


def _document(data: bytes) -> dict:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return json.loads(z.read("graphport.json"))


@pytest.mark.parametrize("lower, dialect, verifier", [
    (None, "TRAINING", "TrainingIRVerifier"),
    ({}, "ATEN", "Verifier"),
    ("default", "ATEN", "CoreATenVerifier"),
])
def test_dialect_round_trips(lower, dialect, verifier):
    ep = gp.export(Net(), (torch.randn(2, 4),))
    if lower == "default":
        ep = ep.run_decompositions()
    elif lower is not None:
        ep = ep.run_decompositions(lower)
    assert ep.dialect == dialect and ep.verifier.__name__ == verifier
    data = saved(ep)
    assert ("dialect" in _document(data)) == (lower is not None)   # exported programs' archives are unchanged
    loaded = gp.load(io.BytesIO(data))
    assert loaded.dialect == dialect and loaded.verifier.__name__ == verifier
    loaded.validate()
    x = torch.randn(2, 4)
    torch.testing.assert_close(loaded.module()(x), ep.module()(x))
    assert saved(loaded) == data


def test_an_unknown_dialect_is_refused():
    ep = gp.export(Net(), (torch.randn(2, 4),)).run_decompositions()
    data = saved(ep)
    doc = _document(data)
    doc["dialect"] = "EDGE"
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            dst.writestr(info, json.dumps(doc) if info.filename == "graphport.json" else src.read(info))
    with pytest.raises(gp.ArtifactError, match="dialect"):
        gp.load(io.BytesIO(out.getvalue()))
