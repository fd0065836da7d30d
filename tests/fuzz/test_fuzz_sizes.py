"""Differential fuzzing with the size-arithmetic grammar (size_steps.py): float and integer
size arithmetic, dtypes, data-dependent values, cond/map/scan with size predicates, writes
to inputs, random operators. Refusals are acceptable; wrong values, crashes, hangs and
answers where eager raises are bugs."""
import time

import pytest

from .programs import bugs_of, check_program, describe, generate


def _fuzz(seeds, time_budget):
    t0 = time.time()
    report, n = [], 0
    for seed in seeds:
        if time.time() - t0 > time_budget:
            break
        prog = generate(seed, grammar="sizes")
        n += 1
        seen = set()
        for b in bugs_of(check_program(prog)):
            if b.signature() not in seen:
                seen.add(b.signature())
                report.append(f"--- seed {seed}\n{describe(prog, b)}")
    return n, report


def test_fuzz_sizes_small():
    n, report = _fuzz(range(20_000, 20_040), time_budget=10)
    assert n >= 1
    assert not report, f"{len(report)} bug(s) in {n} programs:\n\n" + "\n".join(report)


@pytest.mark.slow
def test_fuzz_sizes_large():
    n, report = _fuzz(range(30_000, 30_300), time_budget=900)
    assert not report, f"{len(report)} bug(s) in {n} programs:\n\n" + "\n".join(report)
