"""Where dynamic export's time goes: cProfile of graphport's dynamic export of zoo models.

Prints, per model, the static and dynamic export times (median of a few, interleaved), the
share of the pinned small-size re-traces (passes/small_sizes.py), of the operator-by-operator
proof (capture/pinned_metadata.py), the share spent inside sympy, and the top functions by own
time. `--style` writes the spec as bench/dynamic_cost.py's style of that name (default: the
zoo's own spec). The profiled export runs with `audit_python=False`: the Python audit sets
its own trace hooks, which cProfile's would replace (the audit costs little on library code).

    PYTHONPATH=src python bench/profile_dynamic.py [--models bert,gpt2,real:bert_base] [--style max] [--top 15]
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

import graphport as gp  # noqa: E402
from bench import dynamic_cost, harness, measure, zoo  # noqa: E402


def _shares(stats: pstats.Stats) -> dict[str, float]:
    """Seconds spent under the small-size proof (cumulative) and inside sympy (own time)."""
    total = sum(v[2] for v in stats.stats.values())
    sympy_own = sum(v[2] for k, v in stats.stats.items() if "/sympy/" in k[0])
    proof = max((v[3] for k, v in stats.stats.items() if k[2] == "prove_small_sizes"), default=0.0)
    by_size = max((v[3] for k, v in stats.stats.items() if k[2] == "settle"), default=0.0)
    return {"total": total, "sympy": sympy_own, "small_sizes": proof, "operator_proof": by_size}


def profile_model(name: str, style: str | None, repeats: int, top: int) -> None:
    if name.startswith("real:"):
        module, args, kwargs, spec_of = dynamic_cost._real_model(name[5:])
        spec = spec_of(harness.DimFactory(dynamic_cost.style_dim(style) if style else harness.graphport_dim))
    else:
        built = zoo.MODELS[name].build()
        module, (args, kwargs) = built.module, built.example_inputs()
        spec = built.dynamic_shapes(harness.DimFactory(dynamic_cost.style_dim(style))) if style \
            else measure.dynamic_spec(built, "graphport")
    static, dynamic = [], []
    for _ in range(repeats + 1):
        t0 = time.process_time()
        gp.export(module, args, kwargs)
        static.append(time.process_time() - t0)
        t0 = time.process_time()
        gp.export(module, args, kwargs, dynamic_shapes=spec)
        dynamic.append(time.process_time() - t0)
    s, d = statistics.median(static[1:]), statistics.median(dynamic[1:])
    prof = cProfile.Profile()
    prof.enable()
    gp.export(module, args, kwargs, dynamic_shapes=spec, audit_python=False)
    prof.disable()
    stats = pstats.Stats(prof)
    shares = _shares(stats)
    print(f"\n## {name} ({style or 'zoo spec'}): static {s * 1e3:.1f} ms, dynamic {d * 1e3:.1f} ms CPU, "
          f"dynamic/static {d / s:.2f}; under profile: sympy own time {shares['sympy'] / shares['total']:.0%}, "
          f"operator-by-operator proof {shares['operator_proof'] / shares['total']:.0%}, "
          f"small-size re-traces {shares['small_sizes'] / shares['total']:.0%}")
    stats.sort_stats("tottime").print_stats(top)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="bert,gpt2,llama,resnet50,t5")
    parser.add_argument("--style", default=None, help="a style of bench/dynamic_cost.py (max, min1, ...)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--top", type=int, default=15)
    opts = parser.parse_args()
    torch.set_num_threads(1)
    for name in opts.models.split(","):
        with torch.no_grad():
            profile_model(name, opts.style, opts.repeats, opts.top)


if __name__ == "__main__":
    main()
