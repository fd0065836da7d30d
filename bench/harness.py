"""Shared judging and reporting helpers for the zoo, the speed benchmark and ExportDB.

Why one module: the CI tests, the conformance table and the benchmarks must classify an
export attempt (ok / graphport error / internal crash / wrong result) and compare against
eager in exactly the same way, or their numbers would not agree with each other.
graphport is imported lazily and defensively, because a half-written package must show
up as a recorded failure in a table, never as a crash of the harness itself.
"""
from __future__ import annotations

import copy
import datetime
import json
import os
import platform
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
import torch.utils._pytree as pytree

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS_MD = REPO_ROOT / "bench" / "RESULTS.md"

# Outcome statuses, shared by every table.
OK = "ok"                    # exported (and, where checked, verified and matched eager)
ERROR = "error"              # a user-facing error: graphport.GraphportError (not InternalError)
CRASH = "crash"              # an internal error or any non-graphport exception: a graphport bug
WRONG = "wrong"              # exported, but the verifier or the comparison with eager failed
UNSUPPORTED = "unsupported"  # a capability the harness knows is absent (e.g. no gp.Dim yet)
TIMEOUT = "timeout"


def load_graphport() -> tuple[Any, str | None]:
    """Import graphport; return (module or None, one-line import failure)."""
    try:
        import graphport
    except Exception as exc:  # a package under construction may fail to import at all
        return None, f"{type(exc).__name__}: {exc}"
    return graphport, None


class DynamicUnsupported(Exception):
    """graphport has no `Dim` yet, so a dynamic-shape spec cannot even be written for it."""


def graphport_dim(name: str, min: int | None = None, max: int | None = None) -> Any:
    """`gp.Dim(name, min=, max=)`, or DynamicUnsupported while graphport lacks `Dim`."""
    gp, _ = load_graphport()
    if gp is None or not hasattr(gp, "Dim"):
        raise DynamicUnsupported("graphport has no Dim yet (issue 3: symbolic shapes)")
    kwargs = {k: v for k, v in (("min", min), ("max", max)) if v is not None}
    return gp.Dim(name, **kwargs)


def torch_dim(name: str, min: int | None = None, max: int | None = None) -> Any:
    return torch.export.Dim(name, min=min, max=max)


class DimFactory:
    """Builds Dims by name, memoised, so inputs sharing a dimension share one Dim object."""

    def __init__(self, make: Callable[..., Any]):
        self._make = make
        self._dims: dict[str, Any] = {}

    def __call__(self, name: str, min: int | None = None, max: int | None = None) -> Any:
        if name not in self._dims:
            self._dims[name] = self._make(name, min=min, max=max)
        return self._dims[name]


def to_graphport_spec(spec: Any) -> Any:
    """Rewrite a torch.export dynamic_shapes spec (torch Dims) with graphport Dims."""
    if spec is None:
        return None
    dims = DimFactory(graphport_dim)

    def convert(node: Any) -> Any:
        if isinstance(node, torch.export.Dim):
            lo, hi = node.min, node.max
            return dims(node.__name__, min=lo, max=None if hi >= sys.maxsize - 1 else hi)
        if isinstance(node, dict):
            return {k: convert(v) for k, v in node.items()}
        if isinstance(node, (list, tuple)):
            return type(node)(convert(v) for v in node)
        if type(node).__name__ == "_DimHint":
            gp, _ = load_graphport()
            if gp is None or not hasattr(gp, "Dim"):
                raise DynamicUnsupported("graphport has no Dim hints yet (issue 3: symbolic shapes)")
            return getattr(gp.Dim, str(node).split("(")[-1].rstrip(")"))
        return node

    return convert(spec)


@dataclass
class Outcome:
    """What one export attempt did, in a form a table cell and a test assertion share."""

    status: str
    error_type: str = ""
    message: str = ""
    max_abs_diff: float | None = None

    def cell(self) -> str:
        if self.status == OK:
            return "ok"
        return f"{self.status}: {self.error_type}" if self.error_type else self.status


def first_line(text: str, limit: int = 160) -> str:
    """The first non-empty line, without object addresses, so generated tables are stable."""
    line = next((ln.strip() for ln in str(text).splitlines() if ln.strip()), "")
    line = re.sub(r" at 0x[0-9a-f]+", "", line)
    return line if len(line) <= limit else line[: limit - 3] + "..."


def classify_graphport_exception(exc: BaseException) -> Outcome:
    """A GraphportError (other than InternalError) is a legitimate refusal; anything else is a bug."""
    gp, _ = load_graphport()
    user_facing = (
        gp is not None
        and isinstance(exc, gp.GraphportError)
        and not isinstance(exc, getattr(gp, "InternalError", ()))
    )
    return Outcome(ERROR if user_facing else CRASH, type(exc).__name__, first_line(str(exc)) + _at(exc))


def _at(exc: BaseException) -> str:
    """Where a graphport error says it happened (the user's or the model's line), shortened to
    the path inside site-packages; '' when it names none."""
    location = getattr(exc, "location", None)
    if location is None or not getattr(location, "filename", None):
        return ""
    path = str(location.filename).split("site-packages/")[-1]
    return f" [at {path}:{location.lineno}: `{location.code}`]"


def is_call_refusal(exc: BaseException, exporter: str) -> bool:
    """Did `ep.module()` refuse the inputs (its input checks), rather than fail inside the graph?

    graphport refuses with InputMismatchError; torch.export's module raises AssertionError
    "Guard failed: ..." from its guards function, or RuntimeError "Expected input at ..."
    from its input-constraint pre-hook.
    """
    if exporter == "graphport":
        gp, _ = load_graphport()
        return gp is not None and isinstance(exc, getattr(gp, "InputMismatchError", ()))
    text = str(exc)
    return (isinstance(exc, AssertionError) and text.startswith("Guard failed")) or \
        (isinstance(exc, RuntimeError) and text.startswith("Expected input"))


def clone_inputs(value: Any) -> Any:
    """Deep copy inputs so mutation by one run cannot leak into the next."""
    return copy.deepcopy(value)


def max_abs_diff(expected: Any, actual: Any) -> float:
    """Largest absolute difference over two pytrees; raises ValueError on structure mismatch."""
    exp_leaves, exp_spec = pytree.tree_flatten(expected)
    act_leaves, act_spec = pytree.tree_flatten(actual)
    if len(exp_leaves) != len(act_leaves):
        raise ValueError(f"output structure differs: {exp_spec} vs {act_spec}")
    worst = 0.0
    for e, a in zip(exp_leaves, act_leaves):
        if isinstance(e, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                raise ValueError(f"expected a tensor, got {type(a).__name__}")
            if e.shape != a.shape or e.dtype != a.dtype:
                raise ValueError(f"tensor {tuple(e.shape)}/{e.dtype} vs {tuple(a.shape)}/{a.dtype}")
            if e.numel():
                diff = (e.detach().double() - a.detach().double()).abs()
                both_nan = e.isnan() & a.isnan() if e.is_floating_point() else None
                if both_nan is not None:
                    diff = diff.masked_fill(both_nan, 0.0)
                worst = max(worst, float(diff.max()))
        elif isinstance(e, (int, float, bool)) and isinstance(a, (int, float, bool, torch.SymInt)):
            worst = max(worst, abs(float(e) - float(a)))
        elif e != a:
            raise ValueError(f"leaf {e!r} vs {a!r}")
    return worst


def tolerance(expected: Any) -> float:
    """Absolute tolerance scaled to the outputs' magnitude (float32 reassociation noise)."""
    peak = 1.0
    for leaf in pytree.tree_leaves(expected):
        if isinstance(leaf, torch.Tensor) and leaf.is_floating_point() and leaf.numel():
            peak = max(peak, float(leaf.detach().abs().max()))
    return 1e-4 * peak


def compare(expected: Any, actual: Any) -> tuple[bool, float | None, str]:
    """(matches, max abs diff, reason) for eager outputs against exported outputs."""
    try:
        diff = max_abs_diff(expected, actual)
    except ValueError as exc:
        return False, None, str(exc)
    ok = diff <= tolerance(expected)
    return ok, diff, "" if ok else f"max abs diff {diff:.3g} above tolerance {tolerance(expected):.3g}"


def count_nodes(graph: torch.fx.Graph) -> int:
    """Operator nodes only (call_function), comparable between exporters."""
    return sum(1 for n in graph.nodes if n.op == "call_function")


class PeakRSS:
    """Samples resident memory in a thread: peak RSS (MiB) while the block runs."""

    def __init__(self, interval: float = 0.005):
        self.interval = interval
        self.peak_mib = 0.0
        self.start_mib = 0.0
        self._stop = threading.Event()

    @staticmethod
    def current_mib() -> float:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_mib = max(self.peak_mib, self.current_mib())
            time.sleep(self.interval)

    def __enter__(self) -> "PeakRSS":
        self.start_mib = self.peak_mib = self.current_mib()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.peak_mib = max(self.peak_mib, self.current_mib())


def median_seconds(fn: Callable[[], Any], repeats: int, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


def run_isolated(argv: list[str], timeout: float) -> dict[str, Any]:
    """Run a worker in a fresh process; a crash, hang or OOM becomes a record, not an abort.

    The worker writes its JSON result to the file named by its last argument.
    """
    out = Path(argv[-1])
    out.unlink(missing_ok=True)
    proc = subprocess.Popen(argv, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True, text=True)
    try:
        log, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # our own worker's process group only
        log, _ = proc.communicate()
        return {"process": TIMEOUT, "log_tail": (log or "")[-2000:]}
    if out.exists():
        result = json.loads(out.read_text())
        result.setdefault("process", OK)
        return result
    return {"process": f"died (exit {proc.returncode})", "log_tail": (log or "")[-2000:]}


def git_commit() -> str:
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT,
                             capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "src"], cwd=REPO_ROOT,
                               capture_output=True, text=True).stdout.strip()
        return sha + ("+uncommitted src changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def versions() -> dict[str, str]:
    try:
        import transformers
        tf = transformers.__version__
    except ImportError:
        tf = "not installed"
    gp, err = load_graphport()
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {
        "graphport": getattr(gp, "__version__", "0.1.0") if gp else f"import failed ({err})",
        "git": git_commit(),
        "torch": torch.__version__,
        "transformers": tf,
        "python": platform.python_version(),
        "cpu": f"{cpu}, {os.cpu_count()} cores, torch threads {torch.get_num_threads()}, "
               f"load average at start {os.getloadavg()[0]:.1f}",
    }


def command_line() -> str:
    """The command that reproduces this run, relative to the repository root."""
    script = os.path.relpath(os.path.abspath(sys.argv[0]), REPO_ROOT)
    return " ".join([".venv/bin/python", script, *map(shlex.quote, sys.argv[1:])])


def stamp() -> str:
    v = versions()
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    parts = ", ".join(f"{k} {val}" for k, val in v.items())
    return f"Generated {date} by `{command_line()}`  \n{parts}"


RESULTS_SECTIONS = ("export-speed", "model-zoo")  # their order in a freshly created RESULTS.md


def _markers(name: str) -> tuple[str, str]:
    return f"<!-- BEGIN {name} (generated; do not edit) -->", f"<!-- END {name} -->"


def write_section(path: Path, name: str, body: str, title: str) -> None:
    """Replace one generated section of a shared Markdown file, leaving the others intact."""
    begin, end = _markers(name)
    block = f"{begin}\n{body.rstrip()}\n{end}"
    if not path.exists():
        empty = ["\n".join([*_markers(section)[:1], "(not generated yet)", _markers(section)[1]])
                 for section in RESULTS_SECTIONS]
        intro = ("Generated sections: each benchmark script rewrites only its own section, stamped with "
                 "the command that reproduces it (`make bench` runs both).")
        path.write_text(f"# {title}\n\n{intro}\n\n" + "\n\n".join(empty) + "\n")
    text = path.read_text()
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def median(values: list[float]) -> float | None:
    vals = sorted(v for v in values if v is not None)
    if not vals:
        return None
    mid = len(vals) // 2
    return vals[mid] if len(vals) % 2 else (vals[mid - 1] + vals[mid]) / 2


def fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)
