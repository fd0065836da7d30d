"""Long fuzz run of graphport's capture of views / scatters / in-place writes under dynamic dims.

    .venv/bin/python scripts/fuzz_views.py --programs 400 --seed 0 --out fuzz_views_report.md
    .venv/bin/python scripts/fuzz_views.py --grammar sizes --compare-torch --programs 200

`--grammar sizes` draws programs from the size-arithmetic grammar (tests/fuzz/size_steps.py);
`--compare-torch` also runs torch.export on every program and prints both side by side.

Prints a summary table (outcomes, per step kind) and writes minimized reproducers, one per
distinct bug class, to --out.
"""
from __future__ import annotations

import argparse
import collections
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from fuzz.programs import bugs_of, check_program, describe, generate, minimize  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--programs", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="fuzz_views_report.md")
    ap.add_argument("--max-steps", type=int, default=8)
    ap.add_argument("--minimize-per-class", type=int, default=2,
                    help="programs minimized per bug signature (distinct minimized sources are kept)")
    ap.add_argument("--no-minimize", action="store_true")
    ap.add_argument("--grammar", choices=["views", "sizes"], default="views")
    ap.add_argument("--compare-torch", action="store_true",
                    help="check torch.export's programs of the same programs the same way")
    args = ap.parse_args(argv)

    t0 = time.time()
    program_outcome = collections.Counter()      # worst outcome per program and mode
    size_outcome = collections.Counter()          # per swept size point
    refusals = collections.Counter()              # (mode, error class, first line)
    call_refusals = collections.Counter()
    kind_total = collections.Counter()
    kind_bug = collections.Counter()
    by_sig = collections.defaultdict(list)        # signature -> [(program, finding)]
    side_by_side = {"graphport": collections.Counter(), "torch.export": collections.Counter()}
    bug_programs = collections.Counter()
    rank = ["ok", "refused", "refused-at-call", "false-claim", "false-claim-at-call", "wrong",
            "answers-where-eager-raises", "crash-at-call", "hang-at-call", "crash", "hang"]
    for i in range(args.programs):
        seed = args.seed * 1_000_003 + i
        prog = generate(seed, max_steps=args.max_steps, grammar=args.grammar)
        fs = check_program(prog)
        _tally(side_by_side["graphport"], fs)
        bug_programs["graphport"] += bool(bugs_of(fs))
        if args.compare_torch:
            torch_findings = check_program(prog, exporter="torch")
            _tally(side_by_side["torch.export"], torch_findings)
            bug_programs["torch.export"] += bool(bugs_of(torch_findings))
        for mode in ("static", "dynamic"):
            outs = [f.outcome for f in fs if f.mode == mode and f.outcome not in ("exported", "both-raise")]
            worst = max(outs, key=lambda o: rank.index(o)) if outs else "ok"
            program_outcome[(mode, worst)] += 1
        for f in fs:
            if f.sizes is not None or f.mode == "static":
                if f.outcome not in ("exported", "refused", "false-claim", "crash", "hang"):
                    size_outcome[(f.mode, f.outcome)] += 1
            if f.outcome == "refused":
                refusals[(f.mode, f.exc_type, f.message[:100])] += 1
            if f.outcome == "refused-at-call":
                call_refusals[(f.exc_type, f.message[:100])] += 1
        bugs = bugs_of(fs)
        for k in set(prog.kinds()):
            kind_total[k] += 1
            if bugs:
                kind_bug[k] += 1
        seen = set()
        for b in bugs:
            if b.signature() not in seen:
                seen.add(b.signature())
                by_sig[b.signature()].append((prog, b))
        if (i + 1) % 25 == 0:
            print(f"  {i + 1}/{args.programs} programs, {len(by_sig)} bug signatures, {time.time() - t0:.0f}s",
                  flush=True)

    print(f"\n== {args.programs} programs, seed {args.seed}, {time.time() - t0:.0f}s ==")
    print("\nWorst outcome per program:")
    print(f"  {'outcome':32s} {'static':>8s} {'dynamic':>8s}")
    for o in rank:
        print(f"  {o:32s} {program_outcome[('static', o)]:8d} {program_outcome[('dynamic', o)]:8d}")
    print("\nPer size point (calls of ep.module()):")
    for o in rank + ["both-raise"]:
        if size_outcome[("static", o)] or size_outcome[("dynamic", o)]:
            print(f"  {o:32s} {size_outcome[('static', o)]:8d} {size_outcome[('dynamic', o)]:8d}")
    print("\nExport refusals (top 12):")
    for (mode, et, msg), n in refusals.most_common(12):
        print(f"  {n:4d} [{mode}] {et}: {msg}")
    print("\nRefused at call, inside the declared range (top 8):")
    for (et, msg), n in call_refusals.most_common(8):
        print(f"  {n:4d} {et}: {msg}")
    print("\nPer step kind: programs containing it / of which with a bug:")
    for k, n in sorted(kind_total.items(), key=lambda kv: -kind_bug[kv[0]] / kv[1]):
        print(f"  {k:16s} {n:5d} {kind_bug[k]:5d}  ({100 * kind_bug[k] / n:.0f}%)")
    if args.compare_torch:
        print("\nSide by side, the same programs (exports per mode, calls of the exported program):")
        print(f"  {'outcome':32s} {'graphport':>10s} {'torch.export':>13s}")
        for key in sorted(set(side_by_side["graphport"]) | set(side_by_side["torch.export"])):
            print(f"  {key:32s} {side_by_side['graphport'][key]:10d} {side_by_side['torch.export'][key]:13d}")
        print(f"  {'programs with a bug':32s} {bug_programs['graphport']:10d} {bug_programs['torch.export']:13d}")
    print(f"\nDistinct bug signatures: {len(by_sig)}")
    for sig, lst in sorted(by_sig.items(), key=lambda kv: -len(kv[1])):
        print(f"  {len(lst):4d} programs  {' | '.join(map(str, sig))}")

    with open(args.out, "w") as fh:
        fh.write(f"# fuzz_views: {args.programs} programs, seed {args.seed}\n\n")
        for n, (sig, lst) in enumerate(sorted(by_sig.items(), key=lambda kv: -len(kv[1]))):
            fh.write(f"## Bug class {n + 1}: {' | '.join(map(str, sig))}  ({len(lst)} programs)\n\n")
            done = set()
            # smallest programs first
            for prog, f in sorted(lst, key=lambda pf: len(pf[0].steps))[:args.minimize_per_class]:
                if not args.no_minimize:
                    prog, f = minimize(prog, f)
                src = prog.source()
                if src in done:
                    continue
                done.add(src)
                fh.write(f"seed {prog.seed}, step kinds {prog.kinds()}\n\n```python\n{describe(prog, f)}```\n\n")
            fh.flush()
            print(f"  minimized class {n + 1}/{len(by_sig)} ({time.time() - t0:.0f}s)", flush=True)
    print(f"\nreproducers written to {args.out} ({time.time() - t0:.0f}s)")
    return 1 if by_sig else 0


def _tally(counter, findings) -> None:
    """Exports and calls by outcome: `export: exported|refused|crash|hang`, `call: <outcome>`."""
    for f in findings:
        where = "export" if f.outcome in ("exported", "refused", "false-claim", "crash", "hang") else "call"
        counter[f"{where}: {f.outcome}"] += 1


if __name__ == "__main__":
    sys.exit(main())
