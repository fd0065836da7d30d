"""graphport demo: export two small models, print the programs, check them against eager.

Run: python examples/demo.py   (exits non-zero if an exported program disagrees with eager)
"""
from __future__ import annotations

import sys
import time

import torch

import graphport as gp
from models import SmallResNet, TinyLM

TOLERANCE = 1e-4


def demo(name: str, model: torch.nn.Module, max_lines: int | None) -> float:
    args = model.example_inputs()
    start = time.perf_counter()
    ep = gp.export(model, args)
    export_ms = (time.perf_counter() - start) * 1e3

    lines = str(ep).splitlines()
    print(f"===== {name} =====")
    if max_lines is not None and len(lines) > max_lines:
        print("\n".join(lines[:max_lines]))
        print(f"    ... ({len(lines) - max_lines} more lines)")
    else:
        print("\n".join(lines))

    fresh = tuple(a.clone() if not a.is_floating_point() else torch.randn_like(a) for a in args)
    with torch.no_grad():
        diff = max((ep.module()(*a) - model(*a)).abs().max().item() for a in (args, fresh))
    print(f"{name}: export {export_ms:.1f} ms, max |exported - eager| = {diff:.2e}\n")
    return diff


def main() -> int:
    torch.manual_seed(0)
    diffs = {
        "TinyLM": demo("TinyLM", TinyLM().eval(), max_lines=40),
        "SmallResNet": demo("SmallResNet", SmallResNet().eval(), max_lines=None),
    }
    bad = {k: v for k, v in diffs.items() if not v <= TOLERANCE}
    for name, diff in bad.items():
        print(f"FAIL: {name} differs from eager by {diff:.2e} (> {TOLERANCE})", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
