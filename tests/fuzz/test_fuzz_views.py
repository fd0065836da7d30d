"""Differential fuzzing of views, reshapes, scatters and in-place writes under dynamic dims.

Every program is checked against eager on a sweep of sizes (see programs.check_program).
Refusals (graphport errors at export or at call) are acceptable; crashes with non-graphport
errors, hangs, wrong values and answers where eager raises are bugs.
"""
import time

import pytest

from .programs import bugs_of, check_program, describe, generate


def _fuzz(seeds, time_budget):
    t0 = time.time()
    report, n = [], 0
    for seed in seeds:
        if time.time() - t0 > time_budget:
            break
        prog = generate(seed)
        n += 1
        seen = set()
        for b in bugs_of(check_program(prog)):
            if b.signature() in seen:
                continue
            seen.add(b.signature())
            report.append(f"--- seed {seed}\n{describe(prog, b)}")
    return n, report


def test_fuzz_views_small():
    n, report = _fuzz(range(40), time_budget=35)
    assert n >= 10
    assert not report, f"{len(report)} bug(s) in {n} programs:\n\n" + "\n".join(report)


@pytest.mark.slow
def test_fuzz_views_large():
    n, report = _fuzz(range(10_000, 10_300), time_budget=600)
    assert not report, f"{len(report)} bug(s) in {n} programs:\n\n" + "\n".join(report)
