"""What one export costs Python's cyclic garbage collector: collections, their time, and what is left.

Why: an export builds many container objects (nodes, their metadata dicts, tracers, symbolic
sizes) that live until it returns, so the collector's generation counters fill during it and
full collections of the whole process heap (hundreds of milliseconds with transformers
imported) run every few exports. Export never pauses the collector (its state is the process's,
other threads see it); the lever is fewer tracked objects, and a finished export's
intermediates freed by reference counting rather than left in cycles for the collector.

For each model and spec style, after a warm-up export, each of `--rounds` exports reports:

- collections per generation during the export, and the CPU time spent in them
  (`gc.callbacks` start/stop);
- `promoted`: objects the export moved into the oldest generation and still there when it
  returns (alive, or garbage not yet collected): CPython runs a full collection of the whole
  heap once the objects promoted since the last one exceed a quarter of the heap, so this is
  what sets how often a loop of exports pays one;
- `garbage`: the export's intermediates left in reference cycles, which only the collector
  frees: what the collections during the export freed plus what a `gc.collect()` right after
  it finds while the program is still held (0 means they all died by reference counting);
- `program`: GC-tracked objects the returned program keeps alive (`len(gc.get_objects())`
  after that collection minus before the export, the heap collected just before);
- `left`: tracked objects still alive after the program is dropped and the heap collected
  (caches that grew; 0 once warm, but for bounded caches).

Then `--loop` more exports back to back, each program dropped, with no collection forced in
between (a user's loop): `loop gen2` is the full collections they ran, `loop gc %` the share of
their CPU time spent in the collector.

    .venv/bin/python bench/gc_pressure.py [--models bert,llama] [--styles static,max] [--rounds 3]
                                          [--loop 12] [--depth N] [--base REV]

`--depth N` adds bench/scale.py's synthetic transformer at N layers (static). `--base REV`
also measures graphport as of git revision REV, imported next to this tree's
(bench/export_ab.py's `import_revision`), the two alternating round by round.
Prints a table; nothing is written (figures go into a hand-written RESULTS.md section).
"""
from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

import torch  # noqa: E402

from bench import harness  # noqa: E402


class CollectorWatch:
    """Counts collections per generation, the objects they freed and their CPU time while active."""

    def __init__(self) -> None:
        self.collections = [0, 0, 0]
        self.collected = 0
        self.seconds = 0.0
        self._started = 0.0
        self.active = False

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if not self.active:
            return
        if phase == "start":
            self._started = time.process_time()
        else:
            self.seconds += time.process_time() - self._started
            self.collections[info["generation"]] += 1
            self.collected += info["collected"]

    def __enter__(self) -> "CollectorWatch":
        self.collections, self.collected, self.seconds, self.active = [0, 0, 0], 0, 0.0, True
        return self

    def __exit__(self, *exc: object) -> None:
        self.active = False


def one_export(export, watch: CollectorWatch) -> dict[str, Any]:
    gc.collect()
    before = len(gc.get_objects())
    cpu = time.process_time()
    with watch:
        ep = export()
    cpu = time.process_time() - cpu
    promoted = len(gc.get_objects(generation=2)) - before
    row = {"cpu": cpu, "gen": list(watch.collections), "gc_s": watch.seconds, "promoted": promoted,
           "garbage": watch.collected + gc.collect(), "program": len(gc.get_objects()) - before}
    del ep
    gc.collect()
    row["left"] = len(gc.get_objects()) - before
    return row


def export_loop(export, watch: CollectorWatch, rounds: int) -> tuple[int, float]:
    gc.collect()
    cpu = time.process_time()
    with watch:
        for _ in range(rounds):
            export()
    cpu = time.process_time() - cpu
    return watch.collections[2], watch.seconds / cpu


def cases(models: list[str], styles: list[str], depth: int | None):
    from bench.export_ab import model_with_spec

    for name in models:
        for style in styles:
            yield f"{name} {style}", (lambda name=name, style=style: model_with_spec(name, style))
    if depth:
        from bench.scale import BATCH, HIDDEN, SEQ, Stack

        yield f"stack{depth} static", lambda: (Stack(depth).eval(), (torch.randn(BATCH, SEQ, HIDDEN),), {},
                                               lambda package: None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="bert,llama")
    parser.add_argument("--styles", default="static,max")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--loop", type=int, default=12, help="exports back to back for the loop columns")
    parser.add_argument("--depth", type=int, default=None)
    parser.add_argument("--base", default=None, help="also measure graphport as of this git revision")
    opts = parser.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    import graphport

    watch = CollectorWatch()
    gc.callbacks.append(watch)
    with tempfile.TemporaryDirectory() as tmp:
        packages = {"this tree": graphport}
        if opts.base:
            from bench.export_ab import import_revision

            packages = {"base": import_revision(opts.base, Path(tmp)), **packages}
        print(f"{harness.stamp()}\n{opts.rounds} rounds after a warm-up export; medians per export; "
              f"gen0/gen1/gen2: collections of each generation; gc s: CPU in them\n")
        columns = ["model", "graphport", "CPU s", "gen0/gen1/gen2", "gc s", "promoted", "garbage", "program", "left",
                   "loop gen2", "loop gc %"]
        print("| " + " | ".join(columns) + " |\n" + "|---" * len(columns) + "|")
        for label, build in cases([m for m in opts.models.split(",") if m], opts.styles.split(","), opts.depth):
            model, args, kwargs, spec_for = build()
            exports = {side: (lambda p=p, spec=spec_for(p): p.export(model, args, kwargs, dynamic_shapes=spec))
                       for side, p in packages.items()}
            for export in exports.values():
                export()   # warm-up: one-time imports and caches
            rows: dict[str, list[dict[str, Any]]] = {side: [] for side in exports}
            for _ in range(opts.rounds):
                for side, export in exports.items():
                    rows[side].append(one_export(export, watch))
            loops = {side: export_loop(export, watch, opts.loop) for side, export in exports.items()}
            for side, found in rows.items():
                med = lambda key: statistics.median(r[key] for r in found)  # noqa: E731
                gens = "/".join(f"{statistics.median(r['gen'][g] for r in found):g}" for g in range(3))
                cells = [label, side, f"{med('cpu'):.3f}", gens, f"{med('gc_s'):.3f}",
                         *(f"{med(key):.0f}" for key in ("promoted", "garbage", "program", "left")),
                         str(loops[side][0]), f"{100 * loops[side][1]:.0f}"]
                print("| " + " | ".join(cells) + " |", flush=True)
    gc.callbacks.remove(watch)


if __name__ == "__main__":
    main()
