"""Static export time of this tree against another revision of graphport, in one process.

Why: a change to capture's per-node work saves a few percent, less than this shared machine's
drift between two processes. Both revisions are imported side by side (the other one under
the package name `graphport_base`, copied from `git archive REV src`) and their exports
alternate round by round on the same model objects, so drift hits both alike. Figures are
CPU seconds: the median and the minimum per side, and the median of the per-round ratios.

    .venv/bin/python bench/export_ab.py --base REV [--models bert,gpt2,llama,real:bert_base,stack:256] [--rounds 10]
                                        [--llama70b] [--style static|name|max|min1|min2|auto|dynamic|derived]

`--style`: the dynamic_shapes spec written in one of bench/dynamic_cost.py's styles (static: none).

Prints a table; nothing is written (the figures go into a hand-written RESULTS.md section).
"""
from __future__ import annotations

import argparse
import gc
import importlib
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

import torch  # noqa: E402

from bench import harness  # noqa: E402


def import_revision(rev: str, into: Path):
    """graphport as of `rev`, imported as the package `graphport_base` (graphport's own
    imports are relative, so the copy runs its own modules)."""
    archive = into / "src.tar"
    with open(archive, "wb") as out:
        subprocess.run(["git", "-C", str(harness.REPO_ROOT), "archive", rev, "src/graphport"], stdout=out, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    (into / "src" / "graphport").rename(into / "graphport_base")
    sys.path.insert(0, str(into))
    return importlib.import_module("graphport_base")


def llama_70b_meta():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=32000, hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                      num_attention_heads=64, num_key_value_heads=8, max_position_embeddings=4096, use_cache=False)
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg).eval()
    return model, (), {"input_ids": torch.randint(0, cfg.vocab_size, (1, 128), device="meta")}


def model_with_spec(name: str, style: str):
    """(module, args, kwargs, spec_for) of a zoo or `real:` model: `spec_for(package)` writes its
    dynamic_shapes in `style` with that package's Dim (each revision checks its own class)."""
    from bench import dynamic_cost

    if name.startswith("stack:"):   # bench/scale.py's synthetic transformer at that many layers (static)
        from bench.scale import BATCH, HIDDEN, SEQ, Stack

        return Stack(int(name[6:])).eval(), (torch.randn(BATCH, SEQ, HIDDEN),), {}, lambda package: None
    module, args, kwargs, spec_of = (dynamic_cost._real_model(name[5:]) if name.startswith("real:")
                                     else dynamic_cost._zoo_model(name))

    def spec_for(package):
        if style == "static":
            return None
        own = dynamic_cost.gp
        dynamic_cost.gp = package
        try:
            return spec_of(harness.DimFactory(dynamic_cost.style_dim(style)))
        finally:
            dynamic_cost.gp = own
    return module, args, kwargs, spec_for


def compare(packages: dict, model, args, kwargs, rounds: int, spec_for=lambda package: None) -> dict[str, float]:
    specs = {side: spec_for(package) for side, package in packages.items()}
    for side, package in packages.items():
        package.export(model, args, kwargs, dynamic_shapes=specs[side])   # warm-up: each side's one-time costs
    seconds: dict[str, list[float]] = {side: [] for side in packages}
    for _ in range(rounds):
        for side, package in packages.items():
            gc.collect()
            start = time.process_time()
            package.export(model, args, kwargs, dynamic_shapes=specs[side])
            seconds[side].append(time.process_time() - start)
    base, new = seconds["base"], seconds["this tree"]
    return {"base_median": statistics.median(base), "base_min": min(base), "new_median": statistics.median(new),
            "new_min": min(new), "paired": statistics.median(n / b for n, b in zip(new, base))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the git revision to compare against")
    parser.add_argument("--models", default="bert,gpt2,llama,t5,vit,resnet50")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--llama70b", action="store_true", help="also LLaMA-70B's config on the meta device")
    parser.add_argument("--style", default="static", help="the dynamic_shapes style (bench/dynamic_cost.py's STYLES)")
    opts = parser.parse_args()
    torch.set_num_threads(1)   # CPU time counts every thread's; the other benchmarks run on one too
    warnings.simplefilter("ignore")   # a dynamic export's notes on refused small sizes, once per round
    import graphport

    with tempfile.TemporaryDirectory() as tmp:
        base = import_revision(opts.base, Path(tmp))
        packages = {"base": base, "this tree": graphport}
        cases = [(name, lambda name=name: model_with_spec(name, opts.style)) for name in opts.models.split(",") if name]
        if opts.llama70b:
            cases.append(("llama_70b_meta", lambda: (*llama_70b_meta(), lambda package: None)))
        print(f"{harness.stamp()}\nbase {opts.base}, {opts.rounds} rounds, style {opts.style}, CPU seconds; "
              f"load average {os.getloadavg()[0]:.1f}\n")
        print("| model | base median | base min | this tree median | this tree min | median of round ratios |")
        print("|---|---|---|---|---|---|")
        for name, build in cases:
            model, args, kwargs, spec_for = build()
            found = compare(packages, model, args, kwargs, opts.rounds, spec_for)
            print(f"| {name} | {found['base_median']:.4f} | {found['base_min']:.4f} | {found['new_median']:.4f} | "
                  f"{found['new_min']:.4f} | {found['paired']:.3f} |", flush=True)


if __name__ == "__main__":
    main()
