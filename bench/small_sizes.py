"""The small-size proof two ways: re-tracing the program at the pinned size, or replaying
the captured graph there (passes/small_size_replay.py), side by side in one process.

Per zoo model: the static and dynamic export times, the proof by re-trace, and the proof by
replay. The replay is timed whether or not the capture's classification allows it (a
model with an assumption outside metadata computations is proven by the re-trace in
export): the question is what the replay would cost. Medians of interleaved runs.

    PYTHONPATH=src python bench/small_sizes.py [--models bert,gpt2,resnet50] [--repeats 5]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

import graphport as gp  # noqa: E402
from bench import measure, zoo  # noqa: E402
from graphport.passes import small_sizes  # noqa: E402

_export_module = sys.modules["graphport.export"]


def _proof_inputs(built, spec) -> tuple:
    """The arguments export passes to prove_small_sizes, kept from one dynamic export."""
    kept = []
    real = _export_module.prove_small_sizes

    def keep(*args):
        kept.append(args)
        return real(*args)
    args, kwargs = built.example_inputs()
    with mock.patch.object(_export_module, "prove_small_sizes", keep):
        gp.export(built.module, args, kwargs, dynamic_shapes=spec)
    return kept[0]


def _timed(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def _prove(inputs, replay: bool):
    retrace, shapes, graph, constants, user_inputs = inputs
    env = shapes.env
    outside = set(env.assumed_outside_metadata)
    if replay:
        env.assumed_outside_metadata.clear()   # what the replay would cost, allowed or not
        try:
            return small_sizes.prove_small_sizes(retrace, shapes, graph, constants, user_inputs)
        finally:
            env.assumed_outside_metadata |= outside
    with small_sizes.retrace_only():
        return small_sizes.prove_small_sizes(retrace, shapes, graph, constants, user_inputs)


def bench_model(name: str, repeats: int) -> str:
    built = zoo.MODELS[name].build()
    spec = measure.dynamic_spec(built, "graphport")
    inputs = _proof_inputs(built, spec)
    times: dict[str, list[float]] = {"static": [], "dynamic": [], "retrace": [], "replay": []}
    reports = {}
    for _ in range(repeats + 1):
        args, kwargs = built.example_inputs()
        times["static"].append(_timed(lambda: gp.export(built.module, args, kwargs))[0])
        times["dynamic"].append(_timed(lambda: gp.export(built.module, args, kwargs, dynamic_shapes=spec))[0])
        for way in ("retrace", "replay"):
            t, reports[way] = _timed(lambda: _prove(inputs, way == "replay"))
            times[way].append(t)
    med = {k: statistics.median(v[1:]) * 1e3 for k, v in times.items()}
    env = inputs[1].env
    outside = sorted(env.symbols[s].dim_name for s in env.assumed_outside_metadata)
    same = (reports["retrace"].valid == reports["replay"].valid
            and reports["retrace"].refused.keys() == reports["replay"].refused.keys())
    return (f"| {name} | {med['static']:.0f} | {med['dynamic']:.0f} | {med['dynamic'] / med['static']:.2f} | "
            f"{med['retrace']:.0f} | {med['replay']:.0f} | {med['replay'] / med['retrace']:.2f} | "
            f"{reports['replay'].replays}/{reports['replay'].replays + reports['replay'].traces} | "
            f"{'yes' if same else 'NO'} | {', '.join(outside) or '-'} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(zoo.MODELS))
    parser.add_argument("--repeats", type=int, default=5)
    opts = parser.parse_args()
    torch.set_num_threads(1)
    print("| model | static ms | dynamic ms | dyn/static | proof by re-trace ms | proof by replay ms | "
          "replay/re-trace | sizes replayed | same results | assumed outside metadata |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in opts.models.split(","):
        print(bench_model(name, opts.repeats), flush=True)


if __name__ == "__main__":
    main()
