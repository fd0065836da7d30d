"""How each model's sizes 0 and 1 are proven: operator by operator, or by a re-trace.

Why this script: the small-size proof used to re-trace every dynamic zoo model at batch 1,
35-50% of its dynamic export. capture/local_proofs.py proves most assumptions operator by
operator instead; this shows, per model, which dims were proven that way, how many
metadata calls it worked out again and how long that took, and which dims still needed the
re-trace (and its cost). Read by wrapping `DeferredAssumptions.settle` and
`prove_small_sizes` around one dynamic export per model (after a warm-up export).

    PYTHONPATH=src:. python bench/small_size_proof.py [--models bert,detr,...]
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "src")]


def _instrumented() -> dict:
    """Wrap the two proofs; the dict is filled by each export."""
    import graphport.export   # noqa: F401 (the module, for the name the pipeline calls)
    from graphport.capture import local_proofs
    pipeline = sys.modules["graphport.export"]
    seen: dict = {}
    settle, retrace = local_proofs.DeferredAssumptions.settle, pipeline.prove_small_sizes

    def timed_settle(self, proven, by_size=None):
        names = {s: info.dim_name for s, info in self.env.symbols.items()}
        seen.update(calls=len(self.calls))
        start = time.perf_counter()
        settle(self, proven, by_size)
        seen.update(proof_ms=(time.perf_counter() - start) * 1e3, proven=sorted(names[s] for s in self.env.proven_min))

    def timed_retrace(*args, **kwargs):
        start = time.perf_counter()
        report = retrace(*args, **kwargs)
        seen.update(retraces=report.traces, retrace_ms=(time.perf_counter() - start) * 1e3)
        return report

    local_proofs.DeferredAssumptions.settle = timed_settle
    pipeline.prove_small_sizes = timed_retrace
    return seen


def _model(name: str):
    import graphport as gp
    from bench import measure, shape_reasoning, zoo
    if name in shape_reasoning.TRANSFORMERS:
        model, args, kwargs, spec = shape_reasoning._build(name)
        return model, args, kwargs, spec(gp.Dim)
    built = zoo.MODELS[name].build()
    args, kwargs = built.example_inputs()
    return built.module, args, kwargs, measure.dynamic_spec(built, "graphport")


def main() -> None:
    from bench import shape_reasoning, zoo
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join([*zoo.MODELS, *shape_reasoning.TRANSFORMERS]))
    options = parser.parse_args()
    import torch
    import graphport as gp
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    seen = _instrumented()
    print("| model | proven operator by operator | metadata calls | proof ms | re-traced dims' traces | re-trace ms | outcome |")
    print("|---|---|---|---|---|---|---|")
    for name in options.models.split(","):
        model, args, kwargs, spec = _model(name)
        if spec is None:
            continue
        outcome = "ok"
        for _ in range(2):   # a warm-up export, then the one reported
            seen.clear()
            try:
                gp.export(model, args, kwargs, dynamic_shapes=spec)
            except gp.GraphportError as e:
                outcome = f"refused ({type(e).__name__})"
        print(f"| {name} | {', '.join(seen.get('proven', [])) or '-'} | {seen.get('calls', 0)} | "
              f"{seen.get('proof_ms', 0):.0f} | {seen.get('retraces', 0)} | {seen.get('retrace_ms', 0):.0f} | {outcome} |",
              flush=True)


if __name__ == "__main__":
    main()
