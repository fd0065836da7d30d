"""Generate docs/conformance.md: every ExportDB case through torch.export and graphport.

Both exporters are judged by `bench.exportdb.run_case`, the same function the conformance
test uses. All torch.export runs happen before any graphport run, so the reference column
cannot be disturbed by state a graphport failure leaves in the process.

    .venv/bin/python scripts/gen_conformance.py
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from bench import exportdb, harness  # noqa: E402
from bench.harness import ERROR, OK, UNSUPPORTED  # noqa: E402

DOC = harness.REPO_ROOT / "docs" / "conformance.md"


def cell(outcome: harness.Outcome) -> str:
    text = outcome.cell()
    if outcome.status != OK and outcome.message:
        text += f" ({outcome.message})"
    return text.replace("|", "/").replace("\n", " ")


def note(supported: bool, torch_out: harness.Outcome, gp_out: harness.Outcome) -> str:
    if gp_out.status == OK and (not supported or torch_out.status != OK):
        return "graphport better than torch.export"
    if gp_out.status == UNSUPPORTED:
        return "graphport gap: no dynamic-shape API yet"
    if supported and gp_out.status != OK:
        return "graphport gap"
    if not supported and gp_out.status not in (OK, ERROR):
        return "graphport must export correctly or raise a graphport error"
    return ""


def main() -> None:
    cases = exportdb.all_cases()
    torch_results = {name: exportdb.run_case(case, "torch") for name, case in cases.items()}
    gp_results = {name: exportdb.run_case(case, "graphport") for name, case in cases.items()}
    rows = ["| case | tags | torch support level | torch.export result | graphport result | note |",
            "|---|---|---|---|---|---|"]
    for name, case in cases.items():
        supported = exportdb.is_supported_by_torch(case)
        dynamic = " (dynamic shapes)" if case.dynamic_shapes else ""
        rows.append(f"| `{name}`{dynamic} | {', '.join(sorted(case.tags)) or '-'} | "
                    f"{'supported' if supported else 'not supported yet'} | {cell(torch_results[name])} | "
                    f"{cell(gp_results[name])} | {note(supported, torch_results[name], gp_results[name])} |")

    def count(results: dict[str, harness.Outcome]) -> str:
        return f"{sum(r.status == OK for r in results.values())}/{len(results)}"

    DOC.write_text("\n".join([
        "# ExportDB conformance",
        "",
        "Every case of PyTorch's export example database (`torch._export.db.examples`) exported with "
        "torch.export and with graphport, on the case's example inputs and dynamic shapes.",
        "",
        harness.stamp(),
        "",
        "`ok`: exported, passed graphport's verifier (graphport only) and matched eager, outputs and input "
        "mutations, on the example inputs and, for cases with dynamic dims, at a second in-range shape. "
        "`error`: a user-facing exporter error. `crash`: an internal error (a graphport bug). `wrong`: exported "
        "but failed the verifier or the comparison. `unsupported`: graphport has no dynamic-shape API yet. "
        "The expected graphport outcome of each case is data in `tests/conformance/test_exportdb.py`.",
        "",
        f"Exported correctly: torch.export {count(torch_results)}, graphport {count(gp_results)}.",
        "",
        *rows,
        "",
    ]))
    print(f"wrote {DOC.relative_to(harness.REPO_ROOT)}: torch.export {count(torch_results)}, "
          f"graphport {count(gp_results)}")


if __name__ == "__main__":
    main()
