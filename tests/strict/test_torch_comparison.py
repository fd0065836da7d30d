"""The corpus under torch.export's strict mode (slow: Dynamo compiles every program): graphport
refuses every effect torch refuses or exports without, exports every effect-free program, and
docs/strict.md shows the table as it is."""
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent


def _script():
    spec = importlib.util.spec_from_file_location("strict_table", ROOT / "scripts" / "strict_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_graphport_strict_covers_torch_strict_and_docs_are_current():
    script = _script()
    text = script.table()
    for row in text.splitlines()[2:]:
        name, effect, torch_result, ours = [c.strip() for c in row.strip("|").split("|")]
        if effect != "—" or torch_result.startswith("refuses"):
            assert ours.startswith("refuses") or effect == "—", row
        if effect == "—":
            assert ours == "exports", row
        else:
            assert ours.startswith(f"refuses ({effect},"), row
    doc = script.DOC.read_text()
    assert f"{script.BEGIN}\n{text}\n{script.END}" in doc, "regenerate: python scripts/strict_table.py --write"
