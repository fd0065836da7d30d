"""Long fuzz run of graphport.load on mutated archives (tests/serde/mutations.py).

Every case must either be refused at load with ArtifactError, or load into a program that
prints and runs on the original's example inputs (or refuses them with a call-time error
the program states); one case in four loads from a path (memory-mapped weights). Anything
else is printed with the seed and case that reproduce it, and the run fails.

    PYTHONPATH=src python scripts/fuzz_artifact.py --cases 100000 [--seed 0] [--program data_dependent]
"""
from __future__ import annotations

import argparse
import collections
import random
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import graphport as gp  # noqa: E402
from tests.serde.helpers import saved  # noqa: E402
from tests.serde.mutations import OUTCOMES, mutate, try_archive  # noqa: E402
from tests.serde.test_fuzz import data_dependent_program, dynamic_program  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--program", choices=("dynamic", "data_dependent"), default="dynamic",
                        help="the archive mutated: a small dynamic program, or one with data-dependent sizes")
    opts = parser.parse_args()
    ep = dynamic_program() if opts.program == "dynamic" else data_dependent_program()
    archive = saved(ep)
    counts = collections.Counter({outcome: 0 for outcome in (*OUTCOMES, "other")})
    start = time.perf_counter()
    for case in range(opts.cases):
        rng = random.Random(opts.seed * 1_000_003 + case)
        data = mutate(archive, rng)
        try:
            counts[try_archive(data, ep.example_inputs, from_path=case % 4 == 0)] += 1
        except Exception:
            counts["other"] += 1
            print(f"case {case} (seed {opts.seed}): neither refused at load nor a program that prints and runs",
                  file=sys.stderr)
            traceback.print_exc()
        if (case + 1) % 10_000 == 0:
            print(f"{case + 1} cases, {dict(counts)}, {time.perf_counter() - start:.0f}s", flush=True)
    print(f"done: {opts.cases} cases of the {opts.program} program in {time.perf_counter() - start:.0f}s: "
          f"{dict(counts)} (refused: ArtifactError at load; ran: loaded, printed and ran; refused_inputs: loaded, "
          "printed, and refused the example inputs at call time)")
    return 1 if counts["other"] else 0


if __name__ == "__main__":
    sys.exit(main())
