"""The `graphport` console script from a fresh, non-editable install of this checkout: the
entry point is declared, and the viewer's assets ship as package data."""
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_a_fresh_install_provides_the_graphport_command(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    # torch and the other dependencies come from this environment, without its own .pth files
    Path(site, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    checkout = tmp_path / "checkout"   # built from a copy, so the build leaves nothing in the tree
    shutil.copytree(ROOT / "src", checkout / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, checkout / name)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                    "--no-build-isolation", str(checkout)], check=True, env=env, cwd=tmp_path)
    graphport = venv / "bin" / "graphport"
    out = subprocess.run([str(graphport), "--help"], check=True, capture_output=True, text=True, env=env,
                         cwd=tmp_path).stdout
    assert "usage: graphport" in out
    located = subprocess.run([str(python), "-c", "import graphport; print(graphport.__file__)"], check=True,
                             capture_output=True, text=True, env=env, cwd=tmp_path).stdout
    assert located.startswith(str(venv))
    html = tmp_path / "graph.html"
    env["PYTHONPATH"] = str(ROOT / "tests" / "cli")   # the entry point module only
    subprocess.run([str(graphport), "view", "entry:model_and_inputs", "-o", str(html)], check=True, env=env,
                   cwd=tmp_path)
    assert "aten.linear.default" in html.read_text() and "function computeLayout" in html.read_text()
    version = subprocess.run([str(graphport), "--version"], check=True, capture_output=True, text=True, env=env,
                             cwd=tmp_path).stdout
    assert version.startswith("graphport 0.1.0 (torch ")
    missing = subprocess.run([str(graphport), "export", "entry:broken", "-o", "no/dir/x.gport"], capture_output=True,
                             text=True, env=env, cwd=tmp_path)
    assert missing.returncode == 2 and "the directory no/dir does not exist" in missing.stderr
    import torch
    from safetensors.torch import save_file
    save_file({"ids": torch.zeros(3, 5, dtype=torch.int64), "x": torch.randn(3, 5, 3)}, tmp_path / "in.st")
    refused = subprocess.run([str(graphport), "run", "entry:model_and_inputs", "--inputs", "in.st", "-o", "o.st"],
                             capture_output=True, text=True, env=env, cwd=tmp_path)
    assert refused.returncode == 3 and "--dynamic ids:0=MIN..MAX" in refused.stderr
    assert str(graphport) not in refused.stderr   # no location in the launcher script
