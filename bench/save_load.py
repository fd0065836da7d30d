"""graphport.save/load side by side with torch.export.save/load, in one process.

A GPT-2-medium-sized model (transformers config, random weights, ~350M parameters) is
exported once by each exporter; each program is saved and loaded to a local file.
Each round saves with both, then loads with both (who goes first alternates between
rounds); reports each round's ratios (graphport / torch), the medians over the rounds, and
the process's resident memory growth right after each load (graphport maps weights and
reads them on use).

The cost of the weights' integrity check: graphport's load (which checks every stored
tensor against its checksum, reading the mapped weights once) runs beside a load with
`check_weights=False` (lazy, unchecked), each followed by the first call (which reads the
weights either way), and the checksum pass of save is timed on its own.
`--no-torch` leaves torch.export out (the integrity figures only).

    PYTHONPATH=src python bench/save_load.py [--layers 24] [--hidden 1024] [--rounds 3] [--no-torch]
"""
from __future__ import annotations

import argparse
import gc
import os
import statistics
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
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-torch", action="store_true", help="graphport only: the integrity check's cost")
    opts = parser.parse_args()
    import transformers
    import graphport as gp

    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=opts.layers, n_embd=opts.hidden, n_head=opts.heads, use_cache=False)
    model = transformers.GPT2LMHeadModel(config).eval()
    params = sum(p.numel() for p in model.parameters())
    ids = torch.randint(0, config.vocab_size, (1, opts.seq))
    ep_gp = gp.export(model, (ids,))
    ep_torch = None if opts.no_torch else torch.export.export(model, (ids,))
    expected = ep_gp.module()(ids)
    del model
    gc.collect()
    folder = tempfile.mkdtemp(dir=os.environ.get("BENCH_TMP"))
    path_gp, path_torch = os.path.join(folder, "m.gport"), os.path.join(folder, "m.pt2")
    sides = {
        "graphport": (lambda: gp.save(ep_gp, path_gp), lambda: gp.load(path_gp)),
        "torch.export": (lambda: torch.export.save(ep_torch, path_torch), lambda: torch.export.load(path_torch)),
    }
    if opts.no_torch:
        del sides["torch.export"]
    times: dict[tuple[str, str], list[float]] = {(side, op): [] for side in sides for op in ("save", "load", "rss")}
    integrity = integrity_cost(gp, ep_gp, path_gp, ids, opts.rounds)
    same = None
    for round_ in range(opts.rounds if not opts.no_torch else 0):
        order = list(sides) if round_ % 2 == 0 else list(reversed(sides))   # alternate who goes first
        for side in order:
            _, seconds = timed(sides[side][0])
            times[side, "save"].append(seconds)
        for side in order:
            gc.collect()
            base = rss_mib()
            loaded, seconds = timed(sides[side][1])
            times[side, "rss"].append(rss_mib() - base)
            times[side, "load"].append(seconds)
            if side == "graphport" and same is None:
                same = torch.equal(loaded.module()(ids).logits, expected.logits)
            del loaded
        print(f"round {round_ + 1}: " + ", ".join(
            f"{op} {times['graphport', op][-1]:.2f}s / {times['torch.export', op][-1]:.2f}s = "
            f"{times['graphport', op][-1] / times['torch.export', op][-1]:.2f}x" for op in ("save", "load")), flush=True)
    print(f"model: GPT-2 config n_layer={opts.layers} n_embd={opts.hidden}, {params / 1e6:.0f}M parameters, "
          f"archive {os.path.getsize(path_gp) / 2**20:.0f} MiB (graphport)")
    for name, values in integrity.items():
        print(f"{name}: median {statistics.median(values):.3f}s (rounds: {', '.join(f'{v:.3f}' for v in values)})")
    checked = statistics.median(integrity["load checked + first call"])
    unchecked = statistics.median(integrity["load unchecked + first call"])
    print(f"integrity check at load: load + first call {checked:.2f}s checked / {unchecked:.2f}s unchecked = "
          f"{checked / unchecked:.2f}x; checksums at save {statistics.median(integrity['checksums at save']):.3f}s")
    os.unlink(path_gp)
    if opts.no_torch:
        os.rmdir(folder)
        return
    print(f"archive {os.path.getsize(path_torch) / 2**20:.0f} MiB (torch)")
    for op in ("save", "load"):
        ours, theirs = times["graphport", op], times["torch.export", op]
        ratios = sorted(a / b for a, b in zip(ours, theirs))
        print(f"{op}: graphport median {statistics.median(ours):.2f}s, torch.export median "
              f"{statistics.median(theirs):.2f}s, ratio of medians {statistics.median(ours) / statistics.median(theirs):.2f}x "
              f"(per round {ratios[0]:.2f}x-{ratios[-1]:.2f}x, {opts.rounds} rounds, interleaved)")
    print(f"RSS growth right after load (median): graphport {statistics.median(times['graphport', 'rss']):.0f} MiB, "
          f"torch.export {statistics.median(times['torch.export', 'rss']):.0f} MiB")
    print(f"loaded graphport program's outputs identical to the original: {same}")
    os.unlink(path_torch)
    os.rmdir(folder)


def integrity_cost(gp, ep, path: str, ids: torch.Tensor, rounds: int) -> dict[str, list[float]]:
    """Per round: the checksum pass of save alone; load + first call with the check
    (default) and without (check_weights=False), alternating which goes first. The file
    was just written, so its pages are in the page cache for both loads."""
    from graphport.serde.integrity import checksums
    from graphport.serde.weights import stored_bytes
    gp.save(ep, path)
    with open(path, "rb") as f:   # into the page cache (save wrote past it): both loads start warm
        while f.read(1 << 24):
            pass
    out: dict[str, list[float]] = {"checksums at save": [], "load checked": [], "load unchecked": [],
                                   "load checked, CPU seconds of all threads": [],
                                   "load unchecked, CPU seconds of all threads": [],
                                   "load checked + first call": [], "load unchecked + first call": []}
    variants = {"checked": True, "unchecked": False}
    for round_ in range(rounds):
        tensors = {k: (lambda t=t: stored_bytes(t)) for k, t in ep.state_dict.items()}
        out["checksums at save"].append(timed(lambda: checksums(tensors))[1])
        for name in (list(variants) if round_ % 2 == 0 else list(reversed(variants))):
            gc.collect()
            start, cpu = time.perf_counter(), time.process_time()
            loaded = gp.load(path, check_weights=variants[name])
            out[f"load {name}"].append(time.perf_counter() - start)
            out[f"load {name}, CPU seconds of all threads"].append(time.process_time() - cpu)
            with torch.no_grad():
                loaded.module()(ids)
            out[f"load {name} + first call"].append(time.perf_counter() - start)
            del loaded
    return out


if __name__ == "__main__":
    main()
