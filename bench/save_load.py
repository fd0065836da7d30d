"""graphport.save/load side by side with torch.export.save/load, in one process.

A GPT-2-medium-sized model (transformers config, random weights, ~350M parameters) is
exported once by each exporter; each program is saved and loaded to a local file.
Reports seconds per save and load, their ratios (graphport / torch), and the process's
resident memory right after each load (graphport maps weights and reads them on use).

    PYTHONPATH=src python bench/save_load.py [--layers 24] [--hidden 1024]
"""
from __future__ import annotations

import argparse
import gc
import os
import tempfile
import time

import torch


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--seq", type=int, default=16)
    opts = parser.parse_args()
    import transformers
    import graphport as gp

    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=opts.layers, n_embd=opts.hidden, n_head=opts.heads, use_cache=False)
    model = transformers.GPT2LMHeadModel(config).eval()
    params = sum(p.numel() for p in model.parameters())
    ids = torch.randint(0, config.vocab_size, (1, opts.seq))
    ep_gp = gp.export(model, (ids,))
    ep_torch = torch.export.export(model, (ids,))
    del model
    gc.collect()
    folder = tempfile.mkdtemp(dir=os.environ.get("BENCH_TMP"))
    path_gp, path_torch = os.path.join(folder, "m.gport"), os.path.join(folder, "m.pt2")
    _, save_torch = timed(lambda: torch.export.save(ep_torch, path_torch))
    _, save_gp = timed(lambda: gp.save(ep_gp, path_gp))
    expected = ep_gp.module()(ids)
    del ep_gp, ep_torch
    gc.collect()
    base = rss_mib()
    loaded_torch, load_torch = timed(lambda: torch.export.load(path_torch))
    rss_torch = rss_mib() - base
    del loaded_torch
    gc.collect()
    base = rss_mib()
    loaded_gp, load_gp = timed(lambda: gp.load(path_gp))
    rss_gp = rss_mib() - base
    same = torch.equal(loaded_gp.module()(ids).logits, expected.logits)
    print(f"model: GPT-2 config n_layer={opts.layers} n_embd={opts.hidden}, {params / 1e6:.0f}M parameters, "
          f"archive {os.path.getsize(path_gp) / 2**20:.0f} MiB (graphport), "
          f"{os.path.getsize(path_torch) / 2**20:.0f} MiB (torch)")
    print(f"save: graphport {save_gp:.2f}s, torch.export {save_torch:.2f}s, ratio {save_gp / save_torch:.2f}x")
    print(f"load: graphport {load_gp:.2f}s, torch.export {load_torch:.2f}s, ratio {load_gp / load_torch:.2f}x")
    print(f"RSS growth right after load: graphport {rss_gp:.0f} MiB, torch.export {rss_torch:.0f} MiB")
    print(f"loaded graphport program's outputs identical to the original: {same}")
    for p in (path_gp, path_torch):
        os.unlink(p)
    os.rmdir(folder)


if __name__ == "__main__":
    main()
