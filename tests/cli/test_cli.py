"""The `graphport` command line. A few tests run it as users do, in a subprocess
(`python -m graphport`); the rest call its `main(argv)` in this process, which parses and
reports exactly the same way, to keep the suite fast."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import graphport

ROOT = Path(__file__).resolve().parents[2]
ENTRY = "tests.cli.entry"
DYNAMIC = ["--dynamic", "ids:0=batch:0..8", "--dynamic", "ids:1=seq:1..16",
           "--dynamic", "x:0=batch:0..8", "--dynamic", "x:1=seq:1..16"]
needs_artifact = pytest.mark.skipif(not hasattr(graphport, "save"),
                                    reason="needs graphport.save/load (artifact issue 12)")


def subprocess_cli(*args, check_exit: int | None = 0) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    proc = subprocess.run([sys.executable, "-m", "graphport", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    if check_exit is not None:
        assert proc.returncode == check_exit, proc.stdout + proc.stderr
    return proc


@pytest.fixture
def graphport_cli(capsys, monkeypatch):
    """main(argv) in this process, from the project root, with sys.path restored afterwards."""
    from graphport.cli import main
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "path", list(sys.path))

    def run(*args, check_exit: int | None = 0) -> subprocess.CompletedProcess:
        try:
            code = main(list(args))
        except SystemExit as e:   # argparse: --help and usage errors
            code = e.code
        out, err = capsys.readouterr()
        if check_exit is not None:
            assert code == check_exit, out + err
        return subprocess.CompletedProcess(args, code, out, err)
    return run


@pytest.mark.parametrize("command", [[], ["export"], ["inspect"], ["run"], ["check"], ["view"]])
def test_every_command_has_help(graphport_cli, command):
    proc = graphport_cli(*command, "--help")
    assert "usage: graphport" in proc.stdout
    assert "--traceback" in proc.stdout


def test_the_top_level_help_lists_commands_and_exit_codes():
    out = subprocess_cli("--help").stdout
    for command in ("export", "inspect", "run", "check", "view"):
        assert command in out
    assert "exit codes" in out


def test_inspect_an_entry_point_shows_signature_ranges_ops_and_parameters(graphport_cli):
    out = graphport_cli("inspect", f"{ENTRY}:make_model", "--args", f"{ENTRY}:inputs", *DYNAMIC).stdout
    assert "signature: (ids, x)" in out
    assert "ids: int64[batch, seq]" in out and "x: float32[batch, seq, 3]" in out
    assert "batch: VR[0, 8]" in out and "seq: VR[1, 16]" in out
    assert "parameters: 3 tensors, 55 values, 220 B" in out
    assert "aten.embedding.default" in out and "aten.linear.default" in out
    assert "custom ops: none" in out
    assert "ExportedProgram" not in out


def test_inspect_graph_prints_the_program_and_a_factory_may_return_model_and_inputs(graphport_cli):
    out = graphport_cli("inspect", f"{ENTRY}:model_and_inputs", "--graph").stdout
    assert "signature: (ids, x)" in out and "ExportedProgram:" in out and "torch.ops.aten.linear" in out


def test_check_passes_on_a_correct_model(graphport_cli):
    proc = graphport_cli("check", f"{ENTRY}:make_model", "--args", f"{ENTRY}:inputs", *DYNAMIC, "--samples", "6")
    assert proc.stdout.startswith("PASSED: 6 samples inside the contract, 6 agree")
    assert proc.stderr == ""   # no progress bar in a pipe


def test_check_fails_with_exit_code_1_and_the_smallest_failing_size():
    proc = subprocess_cli("check", f"{ENTRY}:Wrong", "--args", f"{ENTRY}:wrong_inputs", "--dynamic", "x:0=n:0..32",
                         "--samples", "8", check_exit=1)
    assert proc.stdout.startswith("FAILED")
    assert "mismatch at {'n': 5}" in proc.stdout


def test_a_graphport_error_prints_what_where_and_fix_without_a_traceback():
    proc = subprocess_cli("inspect", f"{ENTRY}:data_dependent", check_exit=3)
    assert proc.stderr.startswith("graphport: error: ")
    assert "entry.py" in proc.stderr and "fix:" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_traceback_on_request(graphport_cli):
    proc = graphport_cli("inspect", f"{ENTRY}:data_dependent", "--traceback", check_exit=3)
    assert "Traceback (most recent call last)" in proc.stderr


@pytest.mark.parametrize("argv, message", [
    (["inspect", "tests.cli.no_such_module:f"], "cannot import module 'tests.cli.no_such_module'"),
    (["inspect", f"{ENTRY}:nothing"], "has no attribute 'nothing'"),
    (["inspect", "missing.gport"], "no such file: missing.gport"),
    (["inspect", f"{ENTRY}:make_model"], "no example inputs"),
    (["inspect", f"{ENTRY}:make_model", "--args", f"{ENTRY}:inputs", "--dynamic", "ids=0..3"],
     "is not of the form NAME:DIM=min..max"),
    (["export", "-o", "x.gport"], "exactly one of MODULE:CALLABLE and --hf"),
])
def test_command_line_mistakes_exit_2_with_a_fix(graphport_cli, argv, message):
    proc = graphport_cli(*argv, check_exit=2)
    assert message in proc.stderr and "fix:" in proc.stderr and "Traceback" not in proc.stderr


def test_argparse_usage_errors_exit_2(graphport_cli):
    proc = graphport_cli("inspect", check_exit=2)
    assert "usage:" in proc.stderr


def test_run_writes_outputs_from_an_entry_point(graphport_cli, tmp_path):
    from safetensors.torch import load_file, save_file

    from tests.cli.entry import make_model
    ids, x = torch.randint(0, 10, (3, 7)), torch.randn(3, 7, 3)
    save_file({"ids": ids, "x": x}, tmp_path / "in.safetensors")
    out = graphport_cli("run", f"{ENTRY}:make_model", "--args", f"{ENTRY}:inputs", *DYNAMIC,
                        "--inputs", str(tmp_path / "in.safetensors"), "-o", str(tmp_path / "out.safetensors")).stdout
    assert "output_0: float32[3, 7, 3]" in out
    got = load_file(tmp_path / "out.safetensors")["output_0"]
    torch.testing.assert_close(got, make_model().eval()(ids, x))


def test_run_names_a_missing_input(graphport_cli, tmp_path):
    from safetensors.torch import save_file
    save_file({"ids": torch.zeros(2, 5, dtype=torch.int64)}, tmp_path / "in.safetensors")
    proc = graphport_cli("run", f"{ENTRY}:model_and_inputs", "--inputs", str(tmp_path / "in.safetensors"),
                         "-o", str(tmp_path / "out.safetensors"), check_exit=2)
    assert "has no tensor named 'x'" in proc.stderr and "float32[2, 5, 3]" in proc.stderr


def test_run_refusing_an_input_outside_the_ranges_exits_3(graphport_cli, tmp_path):
    from safetensors.torch import save_file
    save_file({"ids": torch.zeros(9, 5, dtype=torch.int64), "x": torch.randn(9, 5, 3)}, tmp_path / "in.safetensors")
    proc = graphport_cli("run", f"{ENTRY}:make_model", "--args", f"{ENTRY}:inputs", *DYNAMIC,
                         "--inputs", str(tmp_path / "in.safetensors"), "-o", str(tmp_path / "o.safetensors"),
                         check_exit=3)
    assert "outside the range VR[0, 8] of dimension batch" in proc.stderr


def test_view_writes_html_from_an_entry_point(graphport_cli, tmp_path):
    out = tmp_path / "graph.html"
    graphport_cli("view", f"{ENTRY}:model_and_inputs", "-o", str(out))
    html = out.read_text()
    assert html.startswith("<!DOCTYPE html>") and "aten.embedding.default" in html
    assert not re.search(r"""(src|href)\s*=\s*["']?https?:|url\(\s*["']?https?:|@import""", html)


# -- with the artifact (graphport.save / graphport.load) ----------------------------------------

@needs_artifact
def test_export_then_inspect_run_view_and_check_the_saved_program(graphport_cli, tmp_path):
    from safetensors.torch import load_file, save_file

    from tests.cli.entry import make_model
    model = tmp_path / "model.gport"
    out = subprocess_cli("export", f"{ENTRY}:make_model", "--args", f"{ENTRY}:inputs", *DYNAMIC,
                        "-o", str(model)).stdout
    assert f"wrote {model}" in out and model.exists()
    info = subprocess_cli("inspect", str(model)).stdout
    assert "format version:" in info and "batch: VR[0, 8]" in info and "parameters: 3 tensors" in info
    ids, x = torch.randint(0, 10, (4, 2)), torch.randn(4, 2, 3)
    save_file({"ids": ids, "x": x}, tmp_path / "in.safetensors")
    graphport_cli("run", str(model), "--inputs", str(tmp_path / "in.safetensors"), "-o", str(tmp_path / "o.st"))
    torch.testing.assert_close(load_file(tmp_path / "o.st")["output_0"], make_model().eval()(ids, x))
    graphport_cli("view", str(model), "-o", str(tmp_path / "g.html"))
    assert "aten.linear.default" in (tmp_path / "g.html").read_text()
    proc = graphport_cli("check", f"{ENTRY}:make_model", "--args", f"{ENTRY}:inputs", "--program", str(model),
                         "--samples", "4")
    assert proc.stdout.startswith("PASSED")


@pytest.mark.skipif(hasattr(graphport, "save"), reason="only without the artifact: export says what is missing")
def test_export_without_the_artifact_says_what_is_missing(graphport_cli, tmp_path):
    proc = graphport_cli("export", f"{ENTRY}:model_and_inputs", "-o", str(tmp_path / "m.gport"), check_exit=2)
    assert "no graphport.save" in proc.stderr


@needs_artifact
def test_export_a_transformers_model_from_its_config(graphport_cli, tmp_path):
    pytest.importorskip("transformers")
    config = tmp_path / "config.json"
    config.write_text('{"vocab_size": 100, "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, '
                      '"intermediate_size": 64, "max_position_embeddings": 64}')
    model = tmp_path / "bert.gport"
    graphport_cli("export", "--hf", "bert", "--config", str(config), "-o", str(model))
    info = graphport_cli("inspect", str(model)).stdout
    assert "input_ids: int64[batch, seq]" in info and "seq: VR[2, 64]" in info


def test_progress_shows_on_a_terminal_and_stays_quiet_in_a_pipe_and_in_ci(monkeypatch):
    import io

    from graphport.cli.progress import Progress

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.delenv("CI", raising=False)
    tty, pipe = Terminal(), io.StringIO()
    for stream in (tty, pipe):
        bar = Progress("check", stream)
        bar.status("exporting")
        bar.listener("capture", 2, 8)
        bar(3, 6)
        bar.close()
    shown = tty.getvalue()
    assert "check: exporting" in shown and "check: capture" in shown and "2/8" in shown and "3/6" in shown
    assert pipe.getvalue() == ""
    monkeypatch.setenv("CI", "true")
    ci = Terminal()
    bar = Progress("check", ci)
    bar(3, 6)
    bar.close()
    assert ci.getvalue() == ""


def test_command_line_errors_are_graphport_errors_catchable_as_value_errors():
    from graphport.cli.targets import parse_dynamic
    with pytest.raises(ValueError) as info:
        parse_dynamic(["x:0=one..two"])
    assert isinstance(info.value, graphport.CommandLineError) and isinstance(info.value, RuntimeError)
    assert "fix: e.g. --dynamic x:0=1..64" in info.value.msg


def test_dynamic_flags_with_one_dim_name_share_one_dim():
    from graphport.cli.targets import parse_dynamic
    spec = parse_dynamic(["ids:0=batch:1..8", "mask:0=batch:1..8", "ids:1=..512", "mask:1=4.."])
    assert spec["ids"][0] is spec["mask"][0] and spec["ids"][0].__name__ == "batch"
    assert (spec["ids"][1].min, spec["ids"][1].max) == (0, 512) and spec["mask"][1].min == 4


def test_hf_builds_a_model_from_its_config_with_dynamic_batch_and_seq(tmp_path):
    pytest.importorskip("transformers")
    from graphport.cli.summary import summary
    from graphport.cli.targets import load_hf
    config = tmp_path / "config.json"
    config.write_text('{"vocab_size": 100, "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, '
                      '"intermediate_size": 64, "max_position_embeddings": 64}')
    entry = load_hf("bert", str(config), None, [])
    assert entry.model.config.hidden_size == 32 and not entry.model.training
    assert int(entry.kwargs["input_ids"].max()) < 100
    ep = graphport.export(entry.model, entry.args, entry.kwargs, dynamic_shapes=entry.dynamic_shapes)
    info = summary(ep)
    assert "input_ids: int64[batch, seq]" in info and "attention_mask: int64[batch, seq]" in info
    assert "seq: VR[2, 64]" in info


def test_hf_names_an_unknown_model_type():
    pytest.importorskip("transformers")
    from graphport.cli.targets import load_hf
    with pytest.raises(graphport.CommandLineError, match="transformers knows no model type 'no-such-model'"):
        load_hf("no-such-model", None, None, [])


@torch.library.custom_op("graphport_cli_test::twice", mutates_args=())
def twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@twice.register_fake
def _(x):
    return torch.empty_like(x)


def test_inspect_lists_custom_ops_and_buffers():
    from graphport.cli.summary import summary

    class WithBuffer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("offset", torch.ones(3))

        def forward(self, x):
            return twice(x) + self.offset

    info = summary(graphport.export(WithBuffer(), (torch.randn(2, 3),)))
    assert "custom ops: graphport_cli_test.twice.default" in info
    assert "buffers: 1 tensors, 12 B" in info and "parameters: 0 tensors, 0 values, 0 B" in info
    assert "format version" not in info


def test_the_operator_histogram_counts_control_flow_subgraphs():
    from graphport.cli.summary import op_histogram
    from tests.viewer.test_viewer import token_program, with_branches
    hist = op_histogram(with_branches(token_program()))
    assert hist["aten.sin.default"] == 2 and hist["cond"] == 1 and hist["aten.linear.default"] == 1


def test_an_unexpected_error_exits_4_and_says_how_to_see_where(graphport_cli):
    proc = graphport_cli("inspect", f"{ENTRY}:broken", check_exit=4)
    assert proc.stderr.startswith("graphport: unexpected ValueError: the factory failed")
    assert "--traceback" in proc.stderr and "Traceback" not in proc.stderr
    proc = graphport_cli("inspect", f"{ENTRY}:broken", "--traceback", check_exit=4)
    assert "Traceback (most recent call last)" in proc.stderr


# -- answering before the work, in the command line's own terms --------------------------------

def _in_fresh_process(code: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300, check=True).stdout


@pytest.mark.parametrize("argv", [["--help"], ["export", "--help"], ["inspect"], ["--version"],
                                  ["export", f"{ENTRY}:make_model", "-o", "no/such/dir/x.gport"],
                                  ["run", f"{ENTRY}:make_model", "--inputs", "missing.safetensors", "-o", "o.st"],
                                  ["inspect", "missing.gport"]])
def test_help_version_and_argument_errors_answer_without_importing_torch(argv):
    out = _in_fresh_process(
        "import sys\nfrom graphport.cli import main\n"
        f"try:\n    code = main({argv!r})\nexcept SystemExit as e:\n    code = e.code\n"
        "print('exit', code, 'torch' in sys.modules)")
    assert out.splitlines()[-1] in ("exit 0 False", "exit 2 False")


def test_version_names_graphport_and_torch():
    import importlib.metadata
    out = subprocess_cli("--version").stdout
    assert out.startswith(f"graphport {graphport.__version__} (torch {importlib.metadata.version('torch')})")


def test_a_missing_output_directory_fails_at_once_with_exit_2(graphport_cli):
    # the factory raises when called: exit 2, not 4, shows the path was checked before the model was built
    proc = graphport_cli("export", f"{ENTRY}:broken", "-o", "no/such/dir/x.gport", check_exit=2)
    assert "cannot write no/such/dir/x.gport: the directory no/such/dir does not exist" in proc.stderr
    assert "mkdir -p no/such/dir" in proc.stderr and "unexpected" not in proc.stderr


@pytest.mark.parametrize("argv, message", [
    (["run", f"{ENTRY}:broken", "--inputs", "missing.safetensors", "-o", "o.st"],
     "no such file: missing.safetensors (--inputs)"),
    (["check", f"{ENTRY}:broken", "--program", "missing.gport"], "no such file: missing.gport (--program)"),
    (["view", f"{ENTRY}:broken", "-o", "tests"], "cannot write tests: it is a directory"),
    (["export", "--hf", "bert", "--config", "missing.json", "-o", "x.gport"], "no such file: missing.json (--config)"),
    (["convert", "missing.gport", "--to", "pt2"], "no such file: missing.gport"),
    (["convert", f"{ENTRY}:broken", "--to", "onnx"], "convert of MODULE:CALLABLE needs -o"),
])
def test_paths_are_checked_before_the_model_is_built(graphport_cli, argv, message):
    proc = graphport_cli(*argv, check_exit=2)
    assert message in proc.stderr and "fix:" in proc.stderr


def test_a_shape_violation_suggests_the_dynamic_flags_to_pass(graphport_cli):
    proc = graphport_cli("inspect", f"{ENTRY}:Fixed", "--args", f"{ENTRY}:fixed_inputs", "--dynamic", "x:0=1..32",
                         check_exit=3)
    assert "contradicts the --dynamic flags (1 violation)" in proc.stderr
    assert "fix: export again without the --dynamic flag for x:0 (the program needs it static)" in proc.stderr
    assert "Dim(" not in proc.stderr and "dynamic_shapes" not in proc.stderr
    proc = graphport_cli("inspect", f"{ENTRY}:Square", "--args", f"{ENTRY}:square_inputs",
                         "--dynamic", "x:0=1..8", "--dynamic", "x:1=1..8", check_exit=3)
    assert "fix: export again with --dynamic x:0=1..8 --dynamic x:1=x_0:1..8" in proc.stderr
    # the suggested flags, passed, export
    flags = proc.stderr.split("fix: export again with ")[1].split()
    out = graphport_cli("inspect", f"{ENTRY}:Square", "--args", f"{ENTRY}:square_inputs", *flags).stdout
    assert "x: float32[x_0, x_0]" in out


def test_a_refused_input_suggests_the_flag_and_points_at_no_launcher_line(tmp_path):
    from safetensors.torch import save_file
    save_file({"ids": torch.zeros(3, 5, dtype=torch.int64), "x": torch.randn(3, 5, 3)}, tmp_path / "in.st")
    proc = subprocess_cli("run", f"{ENTRY}:model_and_inputs", "--inputs", str(tmp_path / "in.st"),
                          "-o", str(tmp_path / "o.st"), check_exit=3)
    assert "export again with --dynamic ids:0=MIN..MAX" in proc.stderr
    assert "graphport.Dim" not in proc.stderr and "runpy" not in proc.stderr and "\n  at " not in proc.stderr


def test_inspect_shows_a_keyword_only_signature(graphport_cli):
    out = graphport_cli("inspect", f"{ENTRY}:keyword_model").stdout
    assert "signature: (*, ids, x)" in out and "ids: int64[2, 5]" in out


def _torch_program(path):
    from tests.cli.entry import inputs, make_model
    batch = torch.export.Dim("batch", max=8)
    tep = torch.export.export(make_model().eval(), inputs(), dynamic_shapes={"ids": {0: batch}, "x": {0: batch}})
    torch.export.save(tep, path)


def test_inspect_view_and_check_read_a_torch_export_pt2(graphport_cli, tmp_path):
    pt2 = tmp_path / "model.pt2"
    _torch_program(pt2)
    info = graphport_cli("inspect", str(pt2)).stdout
    assert "signature: (ids, x)" in info and "aten.embedding.default" in info and "VR[0, 8]" in info
    assert "format version" not in info
    graphport_cli("view", str(pt2), "-o", str(tmp_path / "g.html"))
    assert "aten.linear.default" in (tmp_path / "g.html").read_text()
    proc = graphport_cli("check", f"{ENTRY}:make_model", "--program", str(pt2), "--samples", "3")
    assert proc.stdout.startswith("PASSED")


def test_a_damaged_pt2_is_an_artifact_error(graphport_cli, tmp_path):
    import zipfile
    bad = tmp_path / "bad.pt2"
    with zipfile.ZipFile(bad, "w") as z:
        z.writestr("bad/.data/version", "1")
    proc = graphport_cli("inspect", str(bad), check_exit=3)
    assert "torch.export.load cannot read" in proc.stderr


@needs_artifact
def test_check_a_saved_program_with_its_own_example_inputs(graphport_cli, tmp_path):
    model = tmp_path / "model.gport"
    graphport_cli("export", f"{ENTRY}:make_model", "--args", f"{ENTRY}:inputs", *DYNAMIC, "-o", str(model))
    proc = graphport_cli("check", f"{ENTRY}:make_model", "--program", str(model), "--samples", "3")
    assert proc.stdout.startswith("PASSED")


def test_convert_to_onnx_keeps_dynamic_dims(graphport_cli, tmp_path):
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnxscript")
    out = tmp_path / "model.onnx"
    graphport_cli("convert", f"{ENTRY}:make_model", "--args", f"{ENTRY}:inputs", *DYNAMIC, "--to", "onnx",
                  "-o", str(out))
    graph = onnx.load(str(out)).graph
    ids = next(i for i in graph.input if i.name == "ids")
    assert all(d.dim_param and not d.dim_value for d in ids.type.tensor_type.shape.dim)   # both symbolic


def test_convert_to_pt2_then_load_with_torch(graphport_cli, tmp_path):
    out = tmp_path / "model.pt2"
    graphport_cli("convert", f"{ENTRY}:model_and_inputs", "--to", "pt2", "-o", str(out))
    from tests.cli.entry import inputs, make_model
    tep = torch.export.load(str(out))
    torch.testing.assert_close(tep.module()(*inputs()), make_model().eval()(*inputs()))


@needs_artifact
def test_convert_a_gport_to_pt2_next_to_it(graphport_cli, tmp_path):
    model = tmp_path / "model.gport"
    graphport_cli("export", f"{ENTRY}:model_and_inputs", "-o", str(model))
    graphport_cli("convert", str(model), "--to", "pt2")
    assert torch.export.load(str(tmp_path / "model.pt2")) is not None


def test_a_failed_conversion_leaves_no_file(graphport_cli, tmp_path, monkeypatch):
    def half_written(tep, path):
        Path(path).write_bytes(b"PK")
        raise RuntimeError("disk full")
    monkeypatch.setattr(torch.export, "save", half_written)
    out = tmp_path / "model.pt2"
    proc = graphport_cli("convert", f"{ENTRY}:model_and_inputs", "--to", "pt2", "-o", str(out), check_exit=4)
    assert "disk full" in proc.stderr and not out.exists()
