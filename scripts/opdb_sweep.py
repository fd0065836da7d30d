"""Run graphport over torch's OpInfo database and print a summary per outcome.

Every op of op_db, float32 on CPU, first two samples, exported static and with Dim.AUTO
dims, compared with eager (see tests/ops/opdb_sweep.py for the rules). One process.

    .venv/bin/python scripts/opdb_sweep.py                  # whole op_db, summary to stdout
    .venv/bin/python scripts/opdb_sweep.py --write          # also rewrite tests/ops/opdb_expected.json
    .venv/bin/python scripts/opdb_sweep.py --ops add cat    # a few ops (--write then merges)
    .venv/bin/python scripts/opdb_sweep.py --subset         # the CI subset only
    .venv/bin/python scripts/opdb_sweep.py --results out.json   # every (op, mode) with its detail
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a script from anywhere

import torch  # noqa: E402
from torch.utils._python_dispatch import _len_torch_dispatch_stack  # noqa: E402

from tests.ops import opdb_sweep as sweep  # noqa: E402

EXPECTED = ROOT / "tests" / "ops" / "opdb_expected.json"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", nargs="*", help="op keys (name or name.variant) to run; default: all of op_db")
    parser.add_argument("--subset", action="store_true", help="only the default CI subset")
    parser.add_argument("--write", action="store_true", help=f"write {EXPECTED.relative_to(ROOT)}")
    parser.add_argument("--results", help="write every (op, mode) outcome with its detail to this json")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    parser.add_argument("--quiet", action="store_true", help="no per-op progress on stderr")
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    ops = sweep.all_ops()
    keys = list(ops)
    if args.ops:
        unknown = [k for k in args.ops if k not in ops]
        if unknown:
            parser.error(f"unknown ops: {unknown}")
        keys = [k for k in keys if k in set(args.ops)]
    if args.subset:
        subset = sweep.default_subset(list(ops))
        keys = [k for k in keys if k in subset]

    results: dict[str, dict[str, sweep.Result]] = {}
    start = time.perf_counter()
    for i, key in enumerate(keys):
        t0 = time.perf_counter()
        results[key] = sweep.run_op(key)
        if _len_torch_dispatch_stack() != 0:   # a leaked mode would poison every later op
            print(f"warning: {key} left a dispatch mode on the stack", file=sys.stderr)
        if not args.quiet:
            cells = " ".join(f"{m}={r.outcome}" for m, r in results[key].items())
            print(f"[{i + 1}/{len(keys)}] {key}: {cells} ({time.perf_counter() - t0:.1f}s)",
                  file=sys.stderr, flush=True)
    elapsed = time.perf_counter() - start

    print(f"graphport op_db sweep: {len(keys)} OpInfos, float32 CPU, first {sweep.MAX_SAMPLES} samples, "
          f"{elapsed:.0f}s")
    print(f"command: .venv/bin/python scripts/opdb_sweep.py {' '.join(argv if argv is not None else sys.argv[1:])}")
    print()
    print(f"| outcome | {' | '.join(sweep.MODES)} |")
    print(f"|---|{'---|' * len(sweep.MODES)}")
    counts = {m: Counter(r[m].outcome for r in results.values()) for m in sweep.MODES}
    for outcome in sweep.OUTCOMES:
        print(f"| {outcome} | {' | '.join(str(counts[m][outcome]) for m in sweep.MODES)} |")
    print()
    for outcome in ("crash", "wrong", "refused", "eager-fails"):
        rows = [(k, m, r[m]) for k, r in results.items() for m in sweep.MODES if r[m].outcome == outcome]
        if not rows:
            continue
        print(f"## {outcome} ({len(rows)})")
        for key, mode, res in rows:
            print(f"- {key} [{mode}]: {res.detail[:300]}")
        print()

    if args.results:
        Path(args.results).write_text(json.dumps(
            {k: {m: {"outcome": res.outcome, "detail": res.detail, "seconds": round(res.seconds, 3), **res.extra}
                 for m, res in r.items()} for k, r in results.items()}, indent=1) + "\n")
    if args.write:
        expected = json.loads(EXPECTED.read_text()) if EXPECTED.exists() and (args.ops or args.subset) else {}
        for key, r in results.items():
            expected.pop(key, None)
            if any(res.outcome != "ok" for res in r.values()):
                expected[key] = {m: r[m].outcome for m in sweep.MODES}
        order = {k: i for i, k in enumerate(ops)}
        expected = {k: expected[k] for k in sorted(expected, key=lambda k: order.get(k, len(order)))}
        lines = [f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in expected.items()]   # one op a line
        EXPECTED.write_text("{\n" + ",\n".join(lines) + "\n}\n")
        print(f"wrote {EXPECTED.relative_to(ROOT)} ({len(expected)} ops not ok)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
