"""The audit's contract beyond the corpus: the program runs once per export (small-size
proofs are not re-traced over Python effects), Python's hooks and the module are left as
found, the switch turns the default audit off, draft_export reports effects as issues, and
real models export under strict=True."""
import sys
import warnings
from pathlib import Path

import pytest
import torch

import graphport as gp

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "models"))
import programs  # noqa: E402

CALLS: list = []


class Appends(torch.nn.Module):
    def forward(self, x):
        CALLS.append(x.shape[0])   # an effect
        return x * 2 if x.shape[0] != 1 else x + 1


class Pure(torch.nn.Module):
    def forward(self, x):
        return x * 2 if x.shape[0] != 1 else x + 1


def test_effects_run_once_and_small_sizes_are_not_proven_by_re_tracing():
    CALLS.clear()
    batch = gp.Dim("batch", min=1, max=16)
    with pytest.warns(gp.PythonEffectWarning):
        ep = gp.export(Appends(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: batch}})
    assert CALLS == [4]   # the program ran once: no proof re-trace repeated the append
    assert any("repeat its Python effects" in note for note in ep.shape_report), ep.shape_report
    torch.testing.assert_close(ep.module()(torch.ones(3, 3)), torch.ones(3, 3) * 2)
    with pytest.raises(gp.InputGuardError):   # size 1 is unproven, so refused rather than answered wrongly
        ep.module()(torch.ones(1, 3))


class CountsCalls(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0
        self.seen = []

    def forward(self, x):
        self.calls += 1
        self.seen.append(x.shape[0])
        return x * 2


def test_writes_export_undoes_do_not_stop_small_size_proofs():
    module = CountsCalls()
    batch = gp.Dim("batch", min=1, max=16)
    with pytest.warns(gp.PythonEffectWarning):
        ep = gp.export(module, (torch.randn(4, 3),), dynamic_shapes={"x": {0: batch}})
    assert {e.kind for e in ep.python_effects if e.refused_by_strict} == {"attribute write", "container write"}
    assert all(e.restored for e in ep.python_effects if e.refused_by_strict)
    assert module.calls == 0 and module.seen == []   # restored after every trace, proofs included
    assert not ep.shape_report   # size 1 proven by re-tracing, as without the writes
    torch.testing.assert_close(ep.module()(torch.ones(1, 3)), torch.ones(1, 3) * 2)


def test_effect_free_programs_keep_their_small_size_proofs():
    batch = gp.Dim("batch", min=1, max=16)
    # at size 1 the program computes something else: the proof re-traces there and finds it
    with pytest.raises(gp.ConstraintViolationError, match="aten::add.Tensor where it called aten::mul.Tensor"):
        gp.export(Pure(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: batch}})


def test_python_hooks_and_module_are_left_as_found():
    seen = []

    def profiler(frame, event, arg):
        seen.append(event)

    module, args = programs.PROGRAMS["ModulePlainAttribute"].build()
    sys.setprofile(profiler)
    try:
        with pytest.warns(gp.PythonEffectWarning):
            gp.export(module, args)
        assert sys.getprofile() is profiler
    finally:
        sys.setprofile(None)
    assert sys.gettrace() is None
    assert module.calls == 0   # export restores the module's plain attributes


def test_export_under_cprofile_keeps_profiling():
    """cProfile's profiler is a C hook that `sys.getprofile()` returns as a non-callable object."""
    import cProfile
    import pstats

    def after_export():
        return 1

    profile = cProfile.Profile()
    profile.enable()
    try:
        ep = gp.export(torch.nn.Linear(3, 3), (torch.randn(2, 3),))
        after_export()
    finally:
        profile.disable()
    assert sys.getprofile() is None
    called = {name for (_, _, name) in pstats.Stats(profile).stats}
    assert "after_export" in called   # the profiler was running again after export
    assert ep.module()(torch.ones(2, 3)).shape == (2, 3)


def test_strict_refusal_restores_hooks():
    module, args = programs.PROGRAMS["Print"].build()
    with pytest.raises(gp.PythonEffectError):
        gp.export(module, args, strict=True)
    assert sys.getprofile() is None and sys.gettrace() is None


def test_lowering_keeps_the_report():
    module, args = programs.PROGRAMS["TimeTime"].build()
    with pytest.warns(gp.PythonEffectWarning):
        ep = gp.export(module, args)
    assert ep.run_decompositions().python_effects == ep.python_effects != []


def test_audit_can_be_turned_off_in_the_default_mode():
    module, args = programs.PROGRAMS["GlobalListAppend"].build()
    with warnings.catch_warnings():
        warnings.simplefilter("error", gp.PythonEffectWarning)
        ep = gp.export(module, args, audit_python=False)
    assert ep.python_effects == []


def test_baked_values_are_reported_not_refused():
    module, args = programs.PROGRAMS["DataclassConfigRead"].build()
    ep = gp.export(module, args, strict=True)
    baked = [e for e in ep.python_effects if e.kind == "baked value"]
    assert any("self.settings.scale = 2.0" in e.what for e in baked), baked


def test_draft_export_reports_effects_as_issues_with_fixes():
    module, args = programs.PROGRAMS["TimeTime"].build()
    ep = gp.draft_export(module, args)
    issues = [i for i in ep._report.failures if i.kind == "python effect"]
    assert len(issues) == 1 and "time.time" in issues[0].what and "is_exporting" in issues[0].fix
    assert issues[0].location.lineno == programs.TimeTime.forward.__code__.co_firstlineno + 1


def test_draft_export_does_not_run_effects_again_to_refine_the_spec():
    CALLS.clear()
    batch = gp.Dim("batch", min=1, max=16)

    class Static(torch.nn.Module):
        def forward(self, x):
            CALLS.append(1)
            torch._check(x.shape[0] == 4)
            return x * 2
    with pytest.raises(gp.ConstraintViolationError) as info:
        gp.draft_export(Static(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: batch}})
    assert CALLS == [1]
    assert "second time" in info.value.msg and any(i.kind == "python effect" for i in info.value.report.failures)


MODELS = ["bert", "resnet"]


@pytest.mark.parametrize("name", MODELS + [pytest.param(n, marks=pytest.mark.slow) for n in ("gpt2", "t5", "llama",
                                                                                              "vit")])
def test_real_models_export_under_strict(name):
    from test_transformers_models import MODELS as ZOO
    model, args, kwargs = ZOO[name]()
    model.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("error", gp.PythonEffectWarning)
        ep = gp.export(model, args, kwargs, strict=True)
    assert not [e for e in ep.python_effects if e.refused_by_strict]


def test_other_threads_running_modules_during_export_are_not_hooked():
    import threading

    stop = threading.Event()
    hooks_seen = []

    def other_thread():
        layer = torch.nn.Linear(3, 3)
        while not stop.is_set():
            layer(torch.randn(1, 3))
        hooks_seen.append((sys.getprofile(), sys.gettrace()))

    worker = threading.Thread(target=other_thread)
    worker.start()
    try:
        module, args = programs.PROGRAMS["HFConfigFlags"].build()
        gp.export(module, args, strict=True)
    finally:
        stop.set()
        worker.join()
    assert hooks_seen == [(None, None)]


INDEXED: list = []


class Probability(float):
    """An argument torch's own Python calls back into: its comparison is the user's code,
    with an effect (F.dropout checks `p < 0.0` after handing the call to capture)."""

    def __lt__(self, other):
        INDEXED.append(1)
        return float(self) < other


class DropsOut(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.dropout(x, Probability(0.25), training=False) * 2


class MarkedTensor(torch.Tensor):
    """A tensor class defined in the user's files."""


class UserHelpers(torch.nn.Module):
    def forward(self, x):
        y = torch.nn.functional.relu(x)   # a torch call the audit sleeps through
        INDEXED.append(y.shape[0])        # the hooks are back for the next line
        return y


def test_effects_inside_torch_calls_are_still_found():
    """The audit's hooks are off while capture handles a torch call that cannot run user code;
    an argument torch calls back into keeps them on, and they are back after every call."""
    INDEXED.clear()
    with pytest.warns(gp.PythonEffectWarning):
        ep = gp.export(DropsOut(), (torch.randn(4, 3),))
    assert INDEXED == [1]
    assert [e.kind for e in ep.python_effects if e.refused_by_strict] and \
        all(e.location.filename == __file__ for e in ep.python_effects)
    INDEXED.clear()
    with pytest.warns(gp.PythonEffectWarning):
        ep = gp.export(UserHelpers(), (torch.randn(4, 3),))
    assert INDEXED == [4] and any(e.location.lineno == UserHelpers.forward.__code__.co_firstlineno + 2
                                  for e in ep.python_effects if e.refused_by_strict)
    assert sys.getprofile() is None and sys.gettrace() is None


def test_which_torch_calls_cannot_run_user_code():
    from graphport.audit.frames import runs_no_user_code
    x = torch.randn(2)
    assert runs_no_user_code(torch.add, (x, x), {"alpha": 2})
    assert runs_no_user_code(torch.Tensor.view, (x, [1, 2]), None)
    assert runs_no_user_code(torch.nn.functional.relu, (x,), {"inplace": False})   # torch's Python
    assert runs_no_user_code(torch.Tensor.__getitem__, (x, (slice(0, 1), Ellipsis, None)), None)
    assert not runs_no_user_code(torch.nn.functional.dropout, (x, Probability(0.25)), None)
    assert not runs_no_user_code(torch.add, (x.as_subclass(MarkedTensor), x), None)
    assert not runs_no_user_code(torch.cond, (True, lambda t: t, lambda t: t, (x,)), None)
    assert not runs_no_user_code(DropsOut().forward, (x,), None)
