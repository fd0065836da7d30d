"""Make the repository's bench/ helpers importable: the conformance corpora and the
benchmarks judge exports with the same code (bench.harness, bench.exportdb, bench.zoo)."""
import sys
from pathlib import Path

REPO_ROOT = str(Path(__file__).resolve().parents[2])
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)
