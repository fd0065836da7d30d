"""Per-call cost of ep.module(): graphport vs torch.export vs eager, side by side in one process.

The module checks every call (structure, dtypes, sizes, relations) before running the
graph. Two figures:

- the overhead: a call of `ep.module()` minus a call of the same graph's body on the
  already-checked leaves (`module._body`), on small models with two dynamic inputs,
  where the checks show (target <= 10 microseconds, read on the one-operator model);
- `ep.module()` against eager on zoo models (target <= 1.02x, median).

Calls alternate round by round (eager, graphport, graphport body, torch.export) so drift
on a shared machine hits them alike; each figure is the median over rounds of the best of
a few timing loops.

    PYTHONPATH=src python bench/module_call.py [--rounds 15] [--models bert,gpt2,llama,t5,vit,resnet50]

Writes the "module-call" section of bench/RESULTS.md.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

import torch  # noqa: E402
import torch.export  # noqa: E402

import graphport as gp  # noqa: E402
from bench import harness  # noqa: E402
from bench.harness import fmt  # noqa: E402

TARGET_OVERHEAD_US, TARGET_VS_EAGER = 10.0, 1.02
ZOO_MODELS = ("bert", "gpt2", "llama", "t5", "vit", "resnet50")


class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(16, 16)
        self.b = torch.nn.Linear(16, 4)

    def forward(self, x, *, mask):
        return self.b(torch.relu(self.a(x))) * mask


class Elementwise(torch.nn.Module):
    """A graph of one operator: what is left of a call is almost all overhead, so the
    overhead's figure is not lost in the noise of a larger graph's time."""

    def forward(self, x, *, mask):
        return x * mask


def per_call_us(fn, number: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=3)) / number * 1e6


def interleaved(calls: dict, rounds: int, number: int) -> dict[str, float]:
    """Median over rounds of each call's microseconds, the calls alternating within a round."""
    times: dict[str, list[float]] = {k: [] for k in calls}
    with torch.no_grad():
        for fn in calls.values():
            fn()
        for _ in range(rounds):
            for key, fn in calls.items():
                times[key].append(per_call_us(fn, number))
    return {k: statistics.median(v) for k, v in times.items()}


def small_model(model: torch.nn.Module, rounds: int) -> dict[str, float]:
    torch.manual_seed(0)
    x, mask = torch.randn(8, 16), torch.ones(8, 16 if isinstance(model, Elementwise) else 4)
    spec = {"x": {0: gp.Dim("b", max=64)}, "mask": {0: gp.Dim("b", max=64)}}
    torch_spec = {"x": {0: torch.export.Dim("b", max=64)}, "mask": {0: torch.export.Dim("b", max=64)}}
    ours = gp.export(model, (x,), {"mask": mask}, dynamic_shapes=spec).module()
    theirs = torch.export.export(model, (x,), {"mask": mask}, dynamic_shapes=torch_spec).module()
    return interleaved({
        "eager": lambda: model(x, mask=mask),
        "graphport": lambda: ours(x, mask=mask),
        "graphport_body": lambda: ours._body(ours, x, mask),
        "torch": lambda: theirs(x, mask=mask),
    }, rounds, number=500)


def zoo_model(name: str, rounds: int) -> dict[str, float]:
    from bench import measure, zoo

    built = zoo.MODELS[name].build()
    args, kwargs = built.example_inputs()
    ours = gp.export(built.module, args, kwargs, dynamic_shapes=measure.dynamic_spec(built, "graphport")).module()
    return interleaved({
        "eager": lambda: built.module(*args, **kwargs),
        "graphport": lambda: ours(*args, **kwargs),
    }, rounds, number=20)


def render(smalls: dict[str, dict[str, float]], zoo_rows: list[tuple[str, dict[str, float]]], rounds: int) -> str:
    small_table = ["| model | eager us | graphport module us | graphport graph body us | torch.export module us "
                   "| graphport overhead us | torch.export module - eager us |", "|---|---|---|---|---|---|---|"]
    for name, r in smalls.items():
        small_table.append(f"| {name} | {fmt(r['eager'])} | {fmt(r['graphport'])} | {fmt(r['graphport_body'])} | "
                           f"{fmt(r['torch'])} | {fmt(r['graphport'] - r['graphport_body'])} | "
                           f"{fmt(r['torch'] - r['eager'])} |")
    overhead = smalls["elementwise"]["graphport"] - smalls["elementwise"]["graphport_body"]
    ratios = [(name, r["graphport"] / r["eager"]) for name, r in zoo_rows]
    vs_eager = statistics.median(r for _, r in ratios) if ratios else None
    table = ["| model | eager us | graphport module us | graphport / eager |", "|---|---|---|---|"]
    table += [f"| {name} | {fmt(r['eager'])} | {fmt(r['graphport'])} | {fmt(r['graphport'] / r['eager'])} |"
              for name, r in zoo_rows]

    def verdict(value, target):
        return "no data" if value is None else ("meets" if value <= target else "misses")

    return "\n\n".join([
        "## Module call overhead",
        harness.stamp(),
        f"Each figure is the median over {rounds} rounds of the best of 3 timing loops, the calls alternating "
        "within a round, under `torch.no_grad()`, one torch thread.",
        "Small models with two inputs `x` and `mask` sharing a dynamic batch Dim (batch 8): `small` is two Linear "
        "layers, `elementwise` one multiplication. The overhead is graphport's `ep.module()` call minus a call of "
        "the same graph's body on the already-checked leaves.\n\n" + "\n".join(small_table),
        "Zoo models (toy sizes, their dynamic dims):\n\n" + "\n".join(table),
        "Summary:\n\n"
        f"- graphport call overhead (module - graph body, elementwise model): **{fmt(overhead)} us** "
        f"(target <= {TARGET_OVERHEAD_US}: {verdict(overhead, TARGET_OVERHEAD_US)})\n"
        f"- median graphport module / eager over the zoo models: **{fmt(vs_eager)}** (target <= {TARGET_VS_EAGER}: "
        f"{verdict(vs_eager, TARGET_VS_EAGER)})",
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--models", default=",".join(ZOO_MODELS), help="zoo models ('' for none)")
    opts = parser.parse_args()
    torch.set_num_threads(1)
    smalls = {"small": small_model(Small().eval(), opts.rounds),
              "elementwise": small_model(Elementwise(), opts.rounds)}
    zoo_rows = [(name, zoo_model(name, opts.rounds)) for name in opts.models.split(",") if name]
    text = render(smalls, zoo_rows, opts.rounds)
    harness.write_section(harness.RESULTS_MD, "module-call", text, "Benchmark results")
    print(text.split("Summary:")[1])


if __name__ == "__main__":
    main()
