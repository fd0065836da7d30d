"""AOTInductor compiles graphport's programs to a package that runs like eager (the fast case
is tests/interop/test_aoti.py's CNN)."""
from __future__ import annotations

import shutil

import pytest

from .programs import consumers, case, graphport_program, params

pytestmark = pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None,
                                reason="AOTInductor needs a C++ compiler")


@pytest.mark.parametrize("model,dynamic,through_file", params())
def test_package_runs_like_eager(model, dynamic, through_file):
    consumers.aoti(graphport_program(model, dynamic, through_file), case(model), dynamic)
