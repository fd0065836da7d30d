"""Load in a fresh process, the way a server starts: import + load + first call, graphport
against torch.export, on GPT-2-medium- and BERT-base-sized programs.

The parent builds each model from its transformers config (random weights), exports it
with both exporters and saves both programs to local files. Then each round starts one
new Python process per exporter (who goes first alternates between rounds; one untimed
process per exporter first writes the bytecode caches an installed package has). Each child
times `import torch`, the rest of its imports (`import graphport`; for torch.export,
`torch.export` and transformers' output classes, without which torch.export.load refuses
the program), the load (graphport: weights memory-mapped and checked against their
checksums, the default; torch.export.load), `ep.module()`, and the first call, checks the
first call's output equals the one the parent computed, and says whether torch._dynamo got
imported (and sympy). Reported: medians over the rounds of each part, and the ratio
graphport / torch.export of the whole, of the whole but `import torch` (which both pay
alike), and of the part each exporter does its own way: the rest of the imports, load and
module(), without `import torch` and without the first call (the same ATen kernels run on
the same weights on both sides, their first run included).

    PYTHONPATH=src python bench/load_fresh_process.py [--models bert_base,gpt2_medium] [--rounds 3]
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
side, path, inputs_path = sys.argv[1:4]
import torch
t1 = time.perf_counter()
if side == "graphport":
    import graphport as gp
    t2 = time.perf_counter()
    ep = gp.load(path)
else:
    import torch.export
    import transformers.modeling_outputs  # torch.export.load needs the output classes registered
    t2 = time.perf_counter()
    ep = torch.export.load(path)
t3 = time.perf_counter()
module = ep.module()
t4 = time.perf_counter()
from safetensors.torch import load_file
inputs = load_file(inputs_path)
t5 = time.perf_counter()
with torch.no_grad():
    out = module(input_ids=inputs["input_ids"])
t6 = time.perf_counter()
first = out[0]   # a ModelOutput (torch.export) or a Record (graphport, transformers not imported): the first field
same = bool(torch.equal(first, inputs["expected"]))
print(json.dumps({"torch": t1 - t0, "import": t2 - t1, "load": t3 - t2, "module": t4 - t3, "call": t6 - t5,
                  "same": same, "dynamo": "torch._dynamo" in sys.modules, "sympy": "sympy" in sys.modules}))
"""

PARTS = ("torch", "import", "load", "module", "call")

MODELS = {
    "bert_base": lambda tf: tf.BertModel(tf.BertConfig()),
    "gpt2_medium": lambda tf: tf.GPT2LMHeadModel(tf.GPT2Config(n_layer=24, n_embd=1024, n_head=16, use_cache=False)),
}


def prepare(name: str, folder: str) -> tuple[str, str, str, int]:
    """Export `name` with both exporters; save both programs and the inputs with the
    expected first output. Returns (graphport file, torch file, inputs file, parameters)."""
    import transformers
    from safetensors.torch import save_file

    import graphport as gp
    torch.manual_seed(0)
    model = MODELS[name](transformers).eval()
    params = sum(p.numel() for p in model.parameters())
    ids = torch.randint(0, 1000, (1, 16))
    with torch.no_grad():
        expected = model(input_ids=ids)[0]
    paths = [os.path.join(folder, f"{name}.{ext}") for ext in ("gport", "pt2", "inputs.safetensors")]
    gp.save(gp.export(model, (), {"input_ids": ids}), paths[0])
    torch.export.save(torch.export.export(model, (), {"input_ids": ids}), paths[1])
    save_file({"input_ids": ids, "expected": expected.contiguous()}, paths[2])
    del model
    gc.collect()
    return *paths, params


def child(side: str, program: str, inputs: str) -> dict:
    # bytecode caches on, as an installed package has them (a first, untimed round writes them)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    done = subprocess.run([sys.executable, "-c", CHILD, side, program, inputs], capture_output=True, text=True,
                          env={**env, "OMP_NUM_THREADS": str(torch.get_num_threads())})
    if done.returncode != 0:
        raise RuntimeError(f"{side} child failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default="bert_base,gpt2_medium")
    parser.add_argument("--rounds", type=int, default=3)
    opts = parser.parse_args()
    folder = tempfile.mkdtemp(dir=os.environ.get("BENCH_TMP"))
    print(f"torch {torch.__version__}, {os.cpu_count()} cores, load average at start {os.getloadavg()[0]:.1f}")
    for name in opts.models.split(","):
        gport, pt2, inputs, params = prepare(name, folder)
        runs: dict[str, list[dict]] = {"graphport": [], "torch.export": []}
        for side in runs:   # untimed: writes the bytecode caches and warms the page cache
            child(side, gport if side == "graphport" else pt2, inputs)
        for round_ in range(opts.rounds):
            order = list(runs) if round_ % 2 == 0 else list(reversed(runs))
            for side in order:
                runs[side].append(child(side, gport if side == "graphport" else pt2, inputs))
        med = {side: {k: statistics.median(r[k] for r in rs) for k in PARTS} for side, rs in runs.items()}
        total = {side: sum(m.values()) for side, m in med.items()}
        past_torch = {side: total[side] - m["torch"] for side, m in med.items()}
        own = {side: m["import"] + m["load"] + m["module"] for side, m in med.items()}
        same = all(r["same"] for rs in runs.values() for r in rs)
        print(f"\n{name}: {params / 1e6:.0f}M parameters, archive {os.path.getsize(gport) / 2**20:.0f} MiB (graphport), "
              f"{os.path.getsize(pt2) / 2**20:.0f} MiB (torch.export); medians of {opts.rounds} fresh processes each")
        print("| | import torch | import (rest) | load | module() | first call | all | all but import torch "
              "| import (rest) + load + module() | torch._dynamo / sympy imported |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for side, m in med.items():
            dynamo, sympy = (sum(r[k] for r in runs[side]) for k in ("dynamo", "sympy"))
            print(f"| {side} | " + " | ".join(f"{m[k]:.2f} s" for k in PARTS) +
                  f" | {total[side]:.2f} s | {past_torch[side]:.2f} s | {own[side]:.2f} s "
                  f"| {dynamo}/{opts.rounds} / {sympy}/{opts.rounds} |")
        print(f"| graphport / torch.export | | | | | | **{total['graphport'] / total['torch.export']:.2f}x** | "
              f"{past_torch['graphport'] / past_torch['torch.export']:.2f}x | "
              f"**{own['graphport'] / own['torch.export']:.2f}x** | |")
        shared = {side: m["torch"] + m["call"] for side, m in med.items()}
        print(f"shared work (import torch + first call): {shared['graphport']:.2f} s (graphport), "
              f"{shared['torch.export']:.2f} s (torch.export), {shared['graphport'] / total['graphport']:.0%} of "
              "graphport's whole; with graphport's own part at zero the whole would be "
              f"{shared['graphport'] / total['torch.export']:.2f}x")
        print(f"first outputs equal the model's in every process: {same}")
        for path in (gport, pt2, inputs):
            os.unlink(path)
    os.rmdir(folder)


if __name__ == "__main__":
    main()
