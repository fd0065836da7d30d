"""Unflatten cost: graphport.unflatten against torch.export.unflatten, and the unflattened
module's run time against ep.module() and eager.

For each model, one process measures side by side (forwards alternating round by round): the time to unflatten (graphport's
program / torch.export's program of the same model), and the median time of one forward of
graphport's unflattened module, its ep.module(), torch's unflattened module and eager.
Printed as ratios; nothing is written.

Forward times are CPU time of the process, with torch on one thread, so that other load on
the machine does not enter the ratios.

    .venv/bin/python bench/unflatten_speed.py [--models bert,llama,resnet50] [--repeats 5]
"""
from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

import torch  # noqa: E402

import graphport as gp  # noqa: E402
from bench import zoo  # noqa: E402
from bench.harness import median_seconds  # noqa: E402


def measure(name: str, repeats: int) -> dict[str, float]:
    built = zoo.MODELS[name].build()
    model = built.module
    args, kwargs = built.example_inputs()
    ep = gp.export(copy.deepcopy(model), args, kwargs)
    tep = torch.export.export(copy.deepcopy(model), args, kwargs)
    ours = median_seconds(lambda: gp.unflatten(ep), repeats)
    theirs = median_seconds(lambda: torch.export.unflatten(tep), repeats)
    runners = {"unflat": gp.unflatten(ep), "module": ep.module(), "torch_unflat": torch.export.unflatten(tep),
               "eager": model}
    times: dict[str, list[float]] = {label: [] for label in runners}
    with torch.no_grad():
        for _ in range(repeats):   # alternating round by round, so machine drift hits all alike
            for label, f in runners.items():
                start = time.process_time()   # CPU time: the machine may be shared
                f(*args, **kwargs)
                times[label].append(time.process_time() - start)
    runs = {label: statistics.median(t) for label, t in times.items()}
    return {"unflatten_vs_torch": ours / theirs, "run_vs_module": runs["unflat"] / runs["module"],
            "run_vs_torch_unflat": runs["unflat"] / runs["torch_unflat"], "run_vs_eager": runs["unflat"] / runs["eager"],
            "unflatten_ms": ours * 1e3}


def main() -> None:
    torch.set_num_threads(1)
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default="mlp,bert,llama,resnet50")
    parser.add_argument("--repeats", type=int, default=5)
    opts = parser.parse_args()
    rows = {name: measure(name, opts.repeats) for name in opts.models.split(",")}
    keys = ["unflatten_ms", "unflatten_vs_torch", "run_vs_module", "run_vs_torch_unflat", "run_vs_eager"]
    print("model".ljust(12) + "".join(k.rjust(22) for k in keys))
    for name, row in rows.items():
        print(name.ljust(12) + "".join(f"{row[k]:22.2f}" for k in keys))
    print("median".ljust(12) + "".join(f"{statistics.median(r[k] for r in rows.values()):22.2f}" for k in keys))


if __name__ == "__main__":
    main()
