"""Long fuzz run of graphport.load on mutated archives (tests/serde/mutations.py).

Every case must either load or raise ArtifactError; anything else (another exception, a
crash) is printed with the seed that reproduces it, and the run fails.

    PYTHONPATH=src python scripts/fuzz_artifact.py --cases 100000 [--seed 0] [--program data_dependent]
"""
from __future__ import annotations

import argparse
import io
import random
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import graphport as gp  # noqa: E402
from tests.serde.helpers import saved  # noqa: E402
from tests.serde.mutations import mutate  # noqa: E402
from tests.serde.test_fuzz import Small, data_dependent_program  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--program", choices=("dynamic", "data_dependent"), default="dynamic",
                        help="the archive mutated: a small dynamic program, or one with data-dependent sizes")
    opts = parser.parse_args()
    if opts.program == "dynamic":
        ep = gp.export(Small(), (torch.randn(5, 4),), dynamic_shapes={"x": {0: gp.Dim("n", min=2, max=32)}})
    else:
        ep = data_dependent_program()
    archive = saved(ep)
    counts = {"loaded": 0, "refused": 0, "other": 0}
    start = time.perf_counter()
    for case in range(opts.cases):
        rng = random.Random(opts.seed * 1_000_003 + case)
        data = mutate(archive, rng)
        try:
            gp.load(io.BytesIO(data))
            counts["loaded"] += 1
        except gp.ArtifactError:
            counts["refused"] += 1
        except Exception:
            counts["other"] += 1
            print(f"case {case} (seed {opts.seed}): not an ArtifactError", file=sys.stderr)
            traceback.print_exc()
        if (case + 1) % 10_000 == 0:
            print(f"{case + 1} cases, {counts}, {time.perf_counter() - start:.0f}s", flush=True)
    print(f"done: {opts.cases} cases in {time.perf_counter() - start:.0f}s: {counts}")
    return 1 if counts["other"] else 0


if __name__ == "__main__":
    sys.exit(main())
