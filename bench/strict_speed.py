"""Strict export against non-strict on the model zoo: what the Python audit costs.

Three modes per model, timed side by side in one process, alternating so that machine noise
hits them alike: `audit_python=False` (the capture alone), the default (audit on, effects
warned), and `strict=True`. Each figure is the best of `--repeats` runs after one warm-up;
the ratios are strict / unaudited and default / unaudited, with their median over the zoo.

    PYTHONPATH=src python bench/strict_speed.py [--models bert gpt2 ...] [--repeats 3]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import graphport as gp  # noqa: E402
import zoo  # noqa: E402

MODES = {"unaudited": {"audit_python": False}, "default": {}, "strict": {"strict": True}}


def best_times(name: str, repeats: int) -> dict[str, float]:
    built = zoo.MODELS[name].build()
    args, kwargs = built.example_inputs()
    spec = built.dynamic_shapes(gp.Dim)

    def run(options: dict) -> float:
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gp.export(built.module, args, kwargs, dynamic_shapes=spec, **options)
        return time.perf_counter() - start

    for options in MODES.values():   # warm-up: imports, meta caches
        run(options)
    best = {mode: float("inf") for mode in MODES}
    for _ in range(repeats):
        for mode, options in MODES.items():
            best[mode] = min(best[mode], run(options))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=[n for n, m in zoo.MODELS.items() if not m.meta])
    parser.add_argument("--repeats", type=int, default=3)
    options = parser.parse_args()
    print("| model | unaudited s | default s | strict s | default / unaudited | strict / unaudited |")
    print("|---|---|---|---|---|---|")
    strict_ratios, default_ratios = [], []
    for name in options.models:
        t = best_times(name, options.repeats)
        strict_ratios.append(t["strict"] / t["unaudited"])
        default_ratios.append(t["default"] / t["unaudited"])
        print(f"| {name} | {t['unaudited']:.3f} | {t['default']:.3f} | {t['strict']:.3f} | "
              f"{default_ratios[-1]:.2f}x | {strict_ratios[-1]:.2f}x |", flush=True)
    print(f"\nmedian strict / unaudited: {statistics.median(strict_ratios):.2f}x; "
          f"median default / unaudited: {statistics.median(default_ratios):.2f}x "
          f"(max strict {max(strict_ratios):.2f}x)")


if __name__ == "__main__":
    main()
