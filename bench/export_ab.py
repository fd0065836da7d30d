"""Static export time of this tree against another revision of graphport, in one process.

Why: a change to capture's per-node work saves a few percent, less than this shared machine's
drift between two processes. Both revisions are imported side by side (the other one under
the package name `graphport_base`, copied from `git archive REV src`) and their exports
alternate round by round on the same model objects, so drift hits both alike. Figures are
CPU seconds: the median and the minimum per side, and the median of the per-round ratios.

    .venv/bin/python bench/export_ab.py --base REV [--models bert,gpt2,llama] [--rounds 10] [--llama70b]

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


def zoo_model(name: str):
    from bench import zoo

    built = zoo.MODELS[name].build()
    args, kwargs = built.example_inputs()
    return built.module, args, kwargs


def compare(exports: dict, model, args, kwargs, rounds: int) -> dict[str, float]:
    for export in exports.values():
        export(model, args, kwargs)   # warm-up: each side's one-time costs
    seconds: dict[str, list[float]] = {side: [] for side in exports}
    for _ in range(rounds):
        for side, export in exports.items():
            gc.collect()
            start = time.process_time()
            export(model, args, kwargs)
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
    opts = parser.parse_args()
    torch.set_num_threads(1)   # CPU time counts every thread's; the other benchmarks run on one too
    import graphport

    with tempfile.TemporaryDirectory() as tmp:
        base = import_revision(opts.base, Path(tmp))
        exports = {"base": base.export, "this tree": graphport.export}
        cases = [(name, lambda name=name: zoo_model(name)) for name in opts.models.split(",") if name]
        if opts.llama70b:
            cases.append(("llama_70b_meta", llama_70b_meta))
        print(f"{harness.stamp()}\nbase {opts.base}, {opts.rounds} rounds, CPU seconds; load average {os.getloadavg()[0]:.1f}\n")
        print("| model | base median | base min | this tree median | this tree min | median of round ratios |")
        print("|---|---|---|---|---|---|")
        for name, build in cases:
            found = compare(exports, *build(), opts.rounds)
            print(f"| {name} | {found['base_median']:.4f} | {found['base_min']:.4f} | {found['new_median']:.4f} | "
                  f"{found['new_min']:.4f} | {found['paired']:.3f} |", flush=True)


if __name__ == "__main__":
    main()
