"""examples/greedy_decode.py runs and its exported programs generate eager's tokens."""
import importlib.util
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "greedy_decode.py"


def test_greedy_decode_example_generates_eagers_tokens(capsys):
    spec = importlib.util.spec_from_file_location("greedy_decode_example", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    assert example.main(new_tokens=5)
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("exported program: [[") and printed[0][len("exported program:"):] == \
        printed[1][len("eager generate():"):]
