"""Strict export on the corpus (programs.py): every effect is refused before it runs, at the
line that makes it, with a fix; every effect-free program exports and matches eager; the
default export warns and reports the same effects and leaves the program's state as
eager's first call would."""
import copy
import linecache
import sys
import warnings
from pathlib import Path

import pytest
import torch

import graphport as gp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from programs import PROGRAMS  # noqa: E402

EFFECTFUL = sorted(n for n, p in PROGRAMS.items() if p.effect is not None)
EFFECT_FREE = sorted(n for n, p in PROGRAMS.items() if p.effect is None)


def _marked(location) -> bool:
    return "# effect" in linecache.getline(location.filename, location.lineno)


def _leaves(out):
    return [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]


def test_corpus_size():
    assert len(PROGRAMS) >= 40 and len(EFFECTFUL) >= 20 and len(EFFECT_FREE) >= 20


@pytest.mark.parametrize("name", EFFECTFUL)
def test_strict_refuses_the_effect_before_it_runs(name):
    program = PROGRAMS[name]
    module, args = program.build()
    before = program.state() if program.state else None
    with pytest.raises(gp.PythonEffectError) as info:
        gp.export(module, args, strict=True)
    err = info.value
    assert isinstance(err, RuntimeError)
    assert err.effect.kind == program.effect
    assert _marked(err.location), err.msg
    assert "programs.py" in err.msg and "fix:" in err.msg
    if program.state is not None:
        assert program.state() == before   # refused before the effect ran


@pytest.mark.parametrize("name", EFFECT_FREE)
def test_strict_exports_effect_free_programs(name):
    module, args = PROGRAMS[name].build()
    eager = copy.deepcopy(module)   # both start from the state export found (buffers included)
    with warnings.catch_warnings():
        warnings.simplefilter("error", gp.PythonEffectWarning)
        ep = gp.export(module, args, strict=True)
    assert not [e for e in ep.python_effects if e.refused_by_strict]
    fresh = tuple(torch.randn_like(a) if isinstance(a, torch.Tensor) else a for a in args)
    exported = ep.module()
    for inputs in (args, fresh):
        expected = _leaves(eager(*inputs))
        got = _leaves(exported(*inputs))
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            torch.testing.assert_close(g, e)


@pytest.mark.parametrize("name", EFFECTFUL)
def test_default_export_warns_and_reports(name):
    program = PROGRAMS[name]
    module, args = program.build()
    with pytest.warns(gp.PythonEffectWarning) as caught:
        ep = gp.export(module, args)
    effects = [e for e in ep.python_effects if e.refused_by_strict]
    assert effects and effects[0].kind == program.effect and _marked(effects[0].location)
    assert any(_marked_file(w) for w in caught)


def _marked_file(warning) -> bool:
    return "# effect" in linecache.getline(warning.filename, warning.lineno)
