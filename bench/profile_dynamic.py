"""Where dynamic export's time goes: cProfile of graphport's dynamic export of zoo models.

Prints, per model, the static and dynamic export times (median of a few, interleaved), the
share of the pinned small-size re-traces (passes/small_sizes.py), the share spent inside
sympy, and the top functions by own time.

    PYTHONPATH=src python bench/profile_dynamic.py [--models bert,gpt2,llama,resnet50,t5] [--top 15]
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
from bench import measure, zoo  # noqa: E402


def _shares(stats: pstats.Stats) -> dict[str, float]:
    """Seconds spent under the small-size proof (cumulative) and inside sympy (own time)."""
    total = sum(v[2] for v in stats.stats.values())
    sympy_own = sum(v[2] for k, v in stats.stats.items() if "/sympy/" in k[0])
    proof = max((v[3] for k, v in stats.stats.items() if k[2] == "prove_small_sizes"), default=0.0)
    return {"total": total, "sympy": sympy_own, "small_sizes": proof}


def profile_model(name: str, repeats: int, top: int) -> None:
    built = zoo.MODELS[name].build()
    spec = measure.dynamic_spec(built, "graphport")
    static, dynamic = [], []
    for _ in range(repeats + 1):
        args, kwargs = built.example_inputs()
        t0 = time.perf_counter()
        gp.export(built.module, args, kwargs)
        static.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        gp.export(built.module, args, kwargs, dynamic_shapes=spec)
        dynamic.append(time.perf_counter() - t0)
    s, d = statistics.median(static[1:]), statistics.median(dynamic[1:])
    args, kwargs = built.example_inputs()
    prof = cProfile.Profile()
    prof.enable()
    gp.export(built.module, args, kwargs, dynamic_shapes=spec)
    prof.disable()
    stats = pstats.Stats(prof)
    shares = _shares(stats)
    print(f"\n## {name}: static {s * 1e3:.1f} ms, dynamic {d * 1e3:.1f} ms, dynamic/static {d / s:.2f}; "
          f"under profile: sympy own time {shares['sympy'] / shares['total']:.0%}, "
          f"small-size proof {shares['small_sizes'] / shares['total']:.0%}")
    stats.sort_stats("tottime").print_stats(top)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="bert,gpt2,llama,resnet50,t5")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--top", type=int, default=15)
    opts = parser.parse_args()
    torch.set_num_threads(1)
    for name in opts.models.split(","):
        profile_model(name, opts.repeats, opts.top)


if __name__ == "__main__":
    main()
