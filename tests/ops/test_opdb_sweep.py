"""Every OpInfo of torch's op_db through graphport, static and with Dim.AUTO dims.

One test per (op, mode). The outcome must be "ok", or what tests/ops/opdb_expected.json
records for that op:
  - "refused" (a clean GraphportError): the test checks it is still refused; an op that now
    exports correctly fails with "update opdb_expected.json";
  - "wrong" / "crash": a strict xfail, so a fix turns the test red until the json is updated;
  - "eager-fails": skipped.
Regenerate the json with `.venv/bin/python scripts/opdb_sweep.py --write`.

A deterministic subset (every 4th op plus common ops, see opdb_sweep.default_subset) runs
by default; the rest is marked slow (GRAPHPORT_SLOW=1).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from . import opdb_sweep as sweep

EXPECTED_PATH = Path(__file__).with_name("opdb_expected.json")
EXPECTED: dict[str, dict[str, str]] = json.loads(EXPECTED_PATH.read_text()) if EXPECTED_PATH.exists() else {}


def _params():
    keys = list(sweep.all_ops())
    subset = sweep.default_subset(keys)
    params = []
    for key in keys:
        for mode in sweep.MODES:
            expected = EXPECTED.get(key, {}).get(mode, "ok")
            marks = [] if key in subset else [pytest.mark.slow]
            if expected in ("wrong", "crash"):
                marks.append(pytest.mark.xfail(strict=True, reason=f"recorded as {expected} in opdb_expected.json"))
            params.append(pytest.param(key, mode, expected, marks=marks, id=f"{key}-{mode}"))
    return params


def _result(key: str, mode: str) -> sweep.Result:
    # One intra-op thread, as the sweep script: the tiny samples only pay for thread wake-ups.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return sweep.run_op(key, modes=(mode,))[mode]
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("key, mode, expected", _params())
def test_opdb(key, mode, expected):
    res = _result(key, mode)
    if res.outcome == "eager-fails":
        pytest.skip(f"eager rejects the samples: {res.detail[:200]}")
    if expected == "refused":
        if res.outcome == "ok":
            pytest.fail(f"{key} [{mode}] is recorded as refused but now exports correctly: "
                        f"update opdb_expected.json (scripts/opdb_sweep.py --write)")
        assert res.outcome == "refused", f"{key} [{mode}]: {res.outcome}: {res.detail}"
        return
    # "ok", or a strict xfail for ops recorded as "wrong" / "crash"
    assert res.outcome == "ok", f"{key} [{mode}]: {res.outcome}: {res.detail}"
