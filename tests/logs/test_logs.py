"""graphport's loggers, the GRAPHPORT_LOGS switch, and progress reporting."""
import io
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import graphport as gp
from graphport import logs

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def shown():
    """What graphport logs while the test runs, with the switch set by the test; undone after."""
    stream = io.StringIO()

    def configure(spec):
        gp.configure_logging(spec, stream=stream)
        return stream
    yield configure
    gp.configure_logging(None)


def test_the_switch_syntax():
    assert logs.parse("+shapes,guards,-capture") == {
        "graphport.shapes": logging.DEBUG, "graphport.shapes.guards": logging.INFO,
        "graphport.capture": logging.ERROR}
    assert set(logs.parse("all")) == set(logs.LOGGERS.values())
    with pytest.raises(ValueError, match="'shapez', which is not one of graphport's loggers") as info:
        logs.parse("shapez")
    assert "guards" in info.value.fix


def test_configuring_touches_graphport_loggers_only(shown):
    root_handlers, root_level = list(logging.root.handlers), logging.root.level
    shown("+shapes")
    assert logging.getLogger("graphport.shapes").level == logging.DEBUG
    assert len(logging.getLogger("graphport").handlers) == 2   # the library's NullHandler and the switch's
    assert logging.root.handlers == root_handlers and logging.root.level == root_level
    gp.configure_logging(None)
    assert logging.getLogger("graphport.shapes").level == logging.NOTSET
    assert len(logging.getLogger("graphport").handlers) == 1 and logging.getLogger("graphport").propagate


def test_nothing_is_enabled_by_default():
    for name in logs.LOGGERS.values():
        assert not logging.getLogger(name).isEnabledFor(logging.INFO)


class Branchy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        if x.shape[0] > 2:   # a guard on a Dim.AUTO dim
            x = x * 2
        return self.lin(x).view(x.shape[0], 2, 2)


class Sliced(torch.nn.Module):
    def forward(self, x):
        return x[1:] * x.shape[0]


def test_guards_with_their_lines_stage_times_small_sizes_and_decompositions(shown):
    stream = shown("export,shapes,guards,passes")
    ep = gp.export(Branchy(), (torch.randn(5, 4),), dynamic_shapes=({0: gp.Dim.AUTO},))
    gp.export(Sliced(), (torch.randn(5, 3),), dynamic_shapes=({0: gp.Dim("n")},))
    ep.run_decompositions()
    text = stream.getvalue()
    line = Branchy.forward.__code__.co_firstlineno + 1
    assert f"[graphport.shapes.guards] guard added: x_size_0 > 2 at {__file__}:{line} in forward" in text
    for stage in ("resolve dynamic_shapes", "capture", "shape checks and small-size proofs", "program and verifier"):
        assert f"[graphport.export] {stage} " in text
    assert "[graphport.shapes] small sizes proven: n = [0, 1, 2] give the same program" in text
    assert "[graphport.passes] decomposing aten.linear.default (1 node) with" in text
    assert "[graphport.passes] run_decompositions:" in text


def test_specializations_are_logged(shown):
    stream = shown("shapes")

    class Fixed(torch.nn.Module):
        def forward(self, x):
            return x.view(2, 4, 2)
    with pytest.warns(UserWarning):
        gp.export(Fixed(), (torch.randn(16),), dynamic_shapes=({0: gp.Dim.AUTO},))
    assert "[graphport.shapes] specialized: x_size_0 (Dim.AUTO) became static = 16" in stream.getvalue()


def test_the_environment_switch_shows_logs_on_stderr_and_leaves_the_root_logger_alone():
    code = ("import logging, torch, graphport as gp\n"
            "class M(torch.nn.Module):\n"
            "    def forward(self, x):\n"
            "        return x * 2 if x.shape[0] > 2 else x\n"
            "gp.export(M(), (torch.randn(5),), dynamic_shapes=({0: gp.Dim.AUTO},))\n"
            "print(logging.root.handlers, logging.root.level)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "GRAPHPORT_LOGS": "+shapes,guards,export"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300,
                          check=True)
    assert "[graphport.shapes.guards] guard added: x_size_0 > 2 at <string>:4 in forward" in proc.stderr
    assert "[graphport.export] capture " in proc.stderr
    assert proc.stdout.strip() == "[] 30"   # no handler on the root logger, its level still WARNING


def test_a_wrong_switch_warns_instead_of_failing_the_import(monkeypatch):
    monkeypatch.setenv("GRAPHPORT_LOGS", "nope")
    with pytest.warns(UserWarning, match="'nope', which is not one of graphport's loggers"):
        logs.configure_from_env()
    assert len(logging.getLogger("graphport").handlers) == 1


def test_progress_reaches_a_listener_and_leaves_no_hook():
    class Deep(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(6)])

        def forward(self, x):
            return self.layers(x)
    seen = []
    with gp.on_progress(lambda stage, done, total: seen.append((stage, done, total))):
        ep = gp.export(Deep(), (torch.randn(2, 4),))
        ep.run_decompositions()
    captured = [s for s in seen if s[0] == "capture"]
    assert captured[-1] == ("capture", 8, 8) and len(captured) >= 8   # Deep, the Sequential, 6 layers
    assert [s for s in seen if s[0] == "export"][-1] == ("export", 5, 5)
    assert [s for s in seen if s[0] == "run_decompositions"][-1] == ("run_decompositions", 3, 3)
    assert not torch.nn.modules.module._global_forward_pre_hooks
    count = len(seen)
    gp.export(Deep(), (torch.randn(2, 4),))   # nobody listens: nothing reported
    assert len(seen) == count


def test_save_and_load_log_and_report_progress(shown, tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    x = torch.randn(2, 64)
    ep = gp.export(model, (x,))
    stream = shown("serde")
    seen = []
    with gp.on_progress(lambda stage, done, total: seen.append((stage, done, total))):
        gp.save(ep, tmp_path / "m.gport")
        loaded = gp.load(tmp_path / "m.gport")
    text = stream.getvalue()
    assert "[graphport.serde] saved 9 nodes, 5 tensors" in text   # four weights and the example input
    assert "[graphport.serde] loaded" in text and "(checked)" in text
    weights = [(done, total) for stage, done, total in seen if stage == "save weights"]
    assert weights and weights[-1][0] == weights[-1][1] == 4 * (x.numel() + sum(p.numel() for p in model.parameters()))
    assert [done for stage, done, _ in seen if stage == "load"] == [1, 2, 3, 4, 5]
    torch.testing.assert_close(loaded.module()(x), model(x))
