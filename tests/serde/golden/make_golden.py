"""Writes the golden archives of this format version (run once per format version; never
overwrite an older version's archives: every later graphport must keep loading them).

    PYTHONPATH=src python tests/serde/golden/make_golden.py
"""
from __future__ import annotations

import io
import json
from pathlib import Path

import torch

import graphport as gp
from graphport.serde.program_json import VERSION


class Static(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.lin(x).relu()


class Derived(torch.nn.Module):
    def forward(self, x, y):
        z = torch.cat([x, y], 0)
        return z.sin() * 2, z.shape[0] // 2


class Mutation(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("total", torch.zeros(3))

    def forward(self, x):
        self.total.add_(x.sum(0))
        return x * self.total


class DataDependent(torch.nn.Module):
    """A count read with .item() and checked, a boolean mask, and a float read from data."""

    def forward(self, x, n):
        k = n.item()
        torch._check(k >= 0)
        torch._check(k <= x.shape[0])
        kept = x[x > 0]
        return x.narrow(0, 0, k) * 2, kept.sum() + kept.numel(), x.sum().item() > 0


def programs() -> dict[str, gp.ExportedProgram]:
    torch.manual_seed(0)
    b = gp.Dim("b", min=2, max=64)
    return {
        "static": gp.export(Static(), (torch.randn(2, 4),)),
        "dynamic_derived": gp.export(Derived(), (torch.randn(3, 4), torch.randn(4, 4)),
                                     dynamic_shapes={"x": {0: b}, "y": {0: b + 1}}),
        "buffer_mutation": gp.export(Mutation(), (torch.randn(2, 3),)),
        "data_dependent": gp.export(DataDependent(), (torch.randn(6), torch.tensor(4))),
    }


def main() -> None:
    folder = Path(__file__).parent
    for name, ep in programs().items():
        args, kwargs = ep.example_inputs
        buf = io.BytesIO()
        gp.save(ep, buf)   # run a copy: running ep itself would update its buffers before they are saved
        outputs = gp.load(io.BytesIO(buf.getvalue())).module()(*[a.clone() for a in args], **kwargs)
        flat = outputs if isinstance(outputs, (tuple, list)) else [outputs]
        expected = [o.tolist() if isinstance(o, torch.Tensor) else o for o in flat]
        gp.save(ep, folder / f"v{VERSION[0]}_{VERSION[1]}_{name}.gport",
                extra_files={"expected.json": json.dumps(expected)})


if __name__ == "__main__":
    main()
