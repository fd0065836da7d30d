"""ViT-family models exported with a dynamic image size: which in-range sizes each program answers.

SigLIP, DINOv2 and ViT (with interpolate_pos_encoding) use their position table as is when
the image has the table's size and interpolate it otherwise. torch.export guards on the
example's answer; graphport captures both sides as a cond (docs/control-flow-splits.md).
Each model is exported with both exporters from the same example (batch 2, 64 pixels: the
table's size and the smallest in range), then each program is called at batch 1 and 3 for
every size in the sweep and compared with eager: `ok` (matched, max abs diff <= 1e-4),
`wrong` (ran and differed), `refused` (the program's input checks refused a size inside the
declared range), or the export's error.

    PYTHONPATH=src:. python -m bench.image_sizes [--models siglip_vision,dinov2,vit_interpolated]
"""
from __future__ import annotations

import argparse
import time
import warnings

import torch

import graphport as gp
from bench import zoo

SIZES = [64, 80, 96, 128, 256]   # pixels; 64 = the position table's size = the smallest in range
BATCHES = [1, 3]


def _hidden(out):
    return out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]


def _sweep(module, built) -> dict:
    results = {}
    for batch in BATCHES:
        for size in SIZES:
            args, kwargs = built.make_inputs(batch=batch, size=size)
            with torch.no_grad():
                want = _hidden(built.module(*args, **kwargs))
                try:
                    got = _hidden(module(*args, **kwargs))
                except Exception:   # noqa: BLE001 (a refused call is what is measured)
                    results[(batch, size)] = "refused"
                    continue
            same = got.shape == want.shape and float((got - want).abs().max()) <= 1e-4
            results[(batch, size)] = "ok" if same else "wrong"
    return results


def _export(exporter, dim, built):
    args, kwargs = built.example_inputs()
    start = time.perf_counter()
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ep = exporter(built.module, args, kwargs, dynamic_shapes=built.dynamic_shapes(dim))
    except Exception as err:   # noqa: BLE001 (the export's verdict is what is measured)
        return None, f"error: {type(err).__name__}", time.perf_counter() - start
    return ep, "ok", time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="siglip_vision,dinov2,vit_interpolated")
    names = parser.parse_args().models.split(",")
    cells = [f"b{b} {s}px" for b in BATCHES for s in SIZES]
    print("| model | exporter | export | export s | conds | " + " | ".join(cells) + " | sizes answered |")
    print("|---|---|---|---|---|" + "---|" * len(cells) + "---|")
    for name in names:
        for label, exporter, dim in (("graphport", gp.export, gp.Dim),
                                     ("torch.export", lambda m, a, k, **kw: torch.export.export(m, a, k, **kw),
                                      torch.export.Dim)):
            built = zoo.ALL_MODELS[name].build()
            ep, verdict, seconds = _export(exporter, dim, built)
            if ep is None:
                row = ["-"] * len(cells)
                answered = 0
                conds = "-"
            else:
                swept = _sweep(ep.module(), built)
                row = [swept[(b, s)] for b in BATCHES for s in SIZES]
                answered = sum(v == "ok" for v in row)
                conds = str(sum(n.target is torch.ops.higher_order.cond for n in ep.graph.nodes))
            print(f"| {name} | {label} | {verdict} | {seconds:.2f} | {conds} | " + " | ".join(row)
                  + f" | {answered}/{len(cells)} |", flush=True)


if __name__ == "__main__":
    main()
