"""Write the comparison table of docs/strict.md: every program of the strict corpus
(tests/strict/programs.py) under torch.export.export(strict=True) and graphport.export(strict=True).

    PYTHONPATH=src python scripts/strict_table.py            # print the table
    PYTHONPATH=src python scripts/strict_table.py --write    # and put it into docs/strict.md

torch's strict mode is run here, in a script and in a slow test, never inside graphport.
"""
from __future__ import annotations

import argparse
import logging
import sys
import warnings
from pathlib import Path

import torch

import graphport as gp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "strict"))
from programs import PROGRAMS  # noqa: E402

DOC = ROOT / "docs" / "strict.md"
BEGIN, END = "<!-- strict-table:begin -->", "<!-- strict-table:end -->"


def torch_outcome(program) -> str:
    module, args = program.build()
    before = program.state() if program.state else None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.export.export(module, args, strict=True)
    except Exception as err:   # noqa: BLE001 - any refusal is a row of the table
        return f"refuses ({type(err).__name__})"
    if program.effect is None:
        return "exports"
    ran = program.state is not None and program.state() != before
    return "exports; the effect " + ("ran during export and " if ran else "") + "is not in the graph"


def graphport_outcome(program) -> str:
    module, args = program.build()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gp.export(module, args, strict=True)
    except gp.PythonEffectError as err:
        return f"refuses ({err.effect.kind}, line {err.location.lineno})"
    except Exception as err:   # noqa: BLE001
        return f"fails ({type(err).__name__})"
    return "exports"


def table() -> str:
    logging.getLogger("torch").setLevel(logging.ERROR)
    rows = ["| program | effect | torch.export strict | graphport strict |", "|---|---|---|---|"]
    for name in sorted(PROGRAMS, key=lambda n: (PROGRAMS[n].effect is None, n)):
        program = PROGRAMS[name]
        rows.append(f"| {name} | {program.effect or '—'} | {torch_outcome(program)} | {graphport_outcome(program)} |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="replace the table in docs/strict.md")
    text = table()
    print(text)
    if parser.parse_args().write:
        doc = DOC.read_text()
        head, _, rest = doc.partition(BEGIN)
        _, _, tail = rest.partition(END)
        DOC.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}")


if __name__ == "__main__":
    main()
