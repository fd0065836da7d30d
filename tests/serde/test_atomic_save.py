"""Saves are atomic: a saving process killed with SIGKILL at any moment leaves the target
as the previous complete file, or absent, never partial."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

import graphport as gp
from .helpers import saved

SRC = str(Path(gp.__file__).resolve().parents[1])


def build(seed: int) -> gp.ExportedProgram:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.Linear(1024, 512))   # ~6 MiB of weights
    return gp.export(model, (torch.ones(2, 1024),))


CHILD = f"""
import sys
sys.path[:0] = [{SRC!r}, {str(Path(__file__).resolve().parents[2])!r}]
import graphport as gp
from tests.serde.test_atomic_save import build
programs = [build(0), build(1)]
target = sys.argv[1]
i = 0
while True:
    gp.save(programs[i % 2], target)
    if i == 0:
        print("ready", flush=True)
    i += 1
"""


def test_killed_saves_leave_the_old_file_or_none(tmp_path):
    expected = {saved(build(0)), saved(build(1))}
    rng = random.Random(4)
    target = tmp_path / "model.gport"
    for attempt in range(3):
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(target)], stdout=subprocess.PIPE,
                                 env={**os.environ, "PYTHONPATH": SRC})
        try:
            if attempt:    # the first attempt is killed during its first save, maybe before the file exists
                assert child.stdout.readline() == b"ready\n"
                time.sleep(rng.uniform(0, 0.5))
            else:
                time.sleep(rng.uniform(2.0, 4.0))
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
        if target.exists():
            assert target.read_bytes() in expected
            gp.load(target)
