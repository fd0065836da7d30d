"""ExportDB conformance: every case of PyTorch's export example database through graphport.

A case torch supports must export, pass the verifier, and match eager (outputs and input
mutations) on its example inputs and, where it has dynamic dims, at a second in-range shape.
A case torch does not support yet must export correctly or raise a graphport error: never
an internal crash, never a wrong result. Gaps are data in EXPECTED_FAILURES: each is an
xfail naming the issue it waits for, so nothing is skipped silently and a landed
capability shows up as XPASS, prompting its entry's removal. The xfail only absorbs a
clean refusal (a graphport error): an internal crash or a wrong result still fails.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from bench import exportdb
from bench.harness import ERROR, OK, UNSUPPORTED


class GraphportGap(AssertionError):
    """graphport refused the case with a user-facing error: a missing capability, not a bug."""


# case name -> why graphport does not pass it yet (the issue it waits for).
EXPECTED_FAILURES: dict[str, str] = {
}

CASES = exportdb.all_cases()


def _params() -> list:
    return [pytest.param(name, marks=pytest.mark.xfail(reason=EXPECTED_FAILURES[name], raises=GraphportGap))
            if name in EXPECTED_FAILURES else name for name in CASES]


@pytest.mark.parametrize("name", _params())
def test_exportdb_case(name: str, record_property) -> None:
    case = CASES[name]
    outcome = exportdb.run_case(case, "graphport")
    detail = f"{outcome.cell()}: {outcome.message}"
    if exportdb.is_supported_by_torch(case):
        if outcome.status in (ERROR, UNSUPPORTED):
            raise GraphportGap(detail)
        assert outcome.status == OK, detail
    else:
        if outcome.status == UNSUPPORTED:
            raise GraphportGap(detail)
        record_property("graphport_better_than_torch", outcome.status == OK)
        assert outcome.status in (OK, ERROR), f"must export correctly or raise a graphport error; got {detail}"


def test_expectations_name_real_cases() -> None:
    """Stale entries would hide nothing, but they would make the table of gaps lie."""
    assert set(EXPECTED_FAILURES) <= set(CASES)


def test_conformance_table_covers_every_case() -> None:
    table = (Path(__file__).resolve().parents[2] / "docs" / "conformance.md").read_text()
    missing = [name for name in CASES if f"`{name}`" not in table]
    assert not missing, f"regenerate with scripts/gen_conformance.py; missing cases: {missing}"
