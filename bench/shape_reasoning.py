"""Time spent in shape reasoning per model, before and after the shape-algebra work.

Why this script: a dynamic export of a vision or audio model asks thousands of questions
about strided sizes; when the algebra cannot settle them quickly (expression growth,
polynomial factoring and sympy arithmetic on the hot path), export time is dominated by
it. This measures, per model, the static export, the dynamic export, and the part of the
dynamic export spent inside the shape environment (deciding, simplifying, size
arithmetic), for this checkout and, with --before, for another checkout of graphport
(e.g. main before the change: `git -C /work/main worktree add /tmp/base18 619b708`).

Each (checkout, model) runs in its own process: a warm-up static and dynamic export, then
`--rounds` alternating static and dynamic exports, medians reported. graphport's algebra
caches are emptied before every timed dynamic export, so a round does not profit from the
previous one. Checkouts alternate per model, so machine load affects both alike.

    python bench/shape_reasoning.py --before /tmp/base18/src [--rounds 3] [--write]

With --patterns NAME..., it times shape patterns of the corpus (tests/shapes/
test_strided_patterns.py; `all` for every one) instead: graphport's export or refusal
against torch.export's on the same program and spec, alternating within one process per
checkout, medians reported, with graphport's reasoning time. A refusal is timed like an
export: it is what a user waits for before reading the constraint.

    python bench/shape_reasoning.py --patterns pad_to_window shifted_windows [--before SRC] [--write]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
SECTION = "## Shape reasoning per model (bench/shape_reasoning.py)"
PATTERN_SECTION = "## Shape patterns: graphport against torch.export (bench/shape_reasoning.py --patterns)"

IMAGE_RANGE = (64, 256)     # torch.export and graphport both refuse DETR/SegFormer below 33
AUDIO_RANGE = (1000, 16000)


# --------------------------------------------------------------------------- models

def _transformers_model(name: str):
    """The five held-out models at small configs, random weights, dynamic image size or audio
    length (batch dynamic too)."""
    import torch
    import transformers as tf

    torch.manual_seed(0)
    audio = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                 conv_dim=(32, 32, 32), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3),
                 num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4)
    if name in ("hubert", "wavlm"):
        model = (tf.HubertModel(tf.HubertConfig(**audio)) if name == "hubert"
                 else tf.WavLMModel(tf.WavLMConfig(**audio)))
        return model, (torch.randn(2, 4000),), {}, lambda D: {
            "input_values": {0: D("b", min=1, max=8), 1: D("t", min=AUDIO_RANGE[0], max=AUDIO_RANGE[1])}}
    if name == "mobilevit":
        model = tf.MobileViTModel(tf.MobileViTConfig(image_size=64, hidden_sizes=[32, 48, 64],
                                                     neck_hidden_sizes=[8, 16, 24, 24, 32, 48, 64],
                                                     num_attention_heads=2))
    elif name == "segformer":
        model = tf.SegformerModel(tf.SegformerConfig(hidden_sizes=[16, 32, 40, 64], num_attention_heads=[1, 2, 2, 4],
                                                     depths=[1, 1, 1, 1], decoder_hidden_size=64))
    elif name == "detr":
        backbone = tf.ResNetConfig(embedding_size=16, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1],
                                   out_features=["stage4"])
        model = tf.DetrModel(tf.DetrConfig(use_timm_backbone=False, backbone_config=backbone, d_model=64,
                                           encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                                           decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                                           num_queries=10, use_pretrained_backbone=False))
    else:
        raise KeyError(name)
    return model, (torch.randn(2, 3, 64, 64),), {}, lambda D: {
        "pixel_values": {0: D("b", min=1, max=8), 2: D("h", min=IMAGE_RANGE[0], max=IMAGE_RANGE[1]),
                         3: D("w", min=IMAGE_RANGE[0], max=IMAGE_RANGE[1])}}


def _zoo_model(name: str):
    sys.path.insert(0, str(REPO))
    from bench.zoo import MODELS
    built = MODELS[name].build()
    args, kwargs = built.example_inputs()
    return built.module, args, kwargs, built.dynamic_shapes


TRANSFORMERS = ["detr", "hubert", "wavlm", "mobilevit", "segformer"]
ZOO_DYNAMIC_SIZE = ["resnet50", "convnext", "efficientnet", "whisper_encoder", "wav2vec2"]


def _build(name: str):
    model, args, kwargs, spec = _transformers_model(name) if name in TRANSFORMERS else _zoo_model(name)
    return model.eval(), args, kwargs, spec


# --------------------------------------------------------------------------- measuring (child)

# ShapeEnv's entry points: every question about sizes and all size arithmetic pass through them
_REASONING_METHODS = ("_decide", "evaluate", "static_value", "simplify", "memo", "specialize", "hint_of",
                      "oblivious_value")


@contextlib.contextmanager
def _timed_shape_env(total: list[float]):
    """Adds to total[0] the time spent inside ShapeEnv's entry points (outermost calls only),
    and puts the methods back afterwards."""
    from graphport.shapes.env import ShapeEnv
    originals = {name: getattr(ShapeEnv, name) for name in _REASONING_METHODS if hasattr(ShapeEnv, name)}
    depth = [0]

    def wrap(method: Callable) -> Callable:
        def timed(*args: Any, **kwargs: Any) -> Any:
            depth[0] += 1
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                depth[0] -= 1
                if depth[0] == 0:
                    total[0] += time.perf_counter() - start
        return timed

    for name, method in originals.items():
        setattr(ShapeEnv, name, wrap(method))
    try:
        yield
    finally:
        for name, method in originals.items():
            setattr(ShapeEnv, name, method)


def _reset_algebra_caches() -> None:
    """Empty graphport's process-wide algebra caches (whichever this checkout has)."""
    from graphport.shapes import expr
    for name in ("_REASONERS",):
        if hasattr(expr, name):
            getattr(expr, name).clear()
    if hasattr(expr, "_factor"):
        expr._factor.cache_clear()


def _measure(name: str, rounds: int) -> dict[str, Any]:
    import graphport as gp

    model, args, kwargs, spec = _build(name)

    def static() -> None:
        gp.export(model, args, kwargs)

    def dynamic() -> tuple[str, str]:
        try:
            gp.export(model, args, kwargs, dynamic_shapes=spec(gp.Dim))
            return "ok", ""
        except gp.GraphportError as error:
            return f"refused ({type(error).__name__})", str(error).splitlines()[0][:160]

    static()
    _reset_algebra_caches()
    dynamic()
    statics, dynamics, reasoning, outcome = [], [], [], ("", "")
    for _ in range(rounds):
        start = time.perf_counter()
        static()
        statics.append(time.perf_counter() - start)
        _reset_algebra_caches()
        total = [0.0]
        with _timed_shape_env(total):
            start = time.perf_counter()
            outcome = dynamic()
            dynamics.append(time.perf_counter() - start)
        reasoning.append(total[0])
    return {"model": name, "static_s": statistics.median(statics), "dynamic_s": statistics.median(dynamics),
            "reasoning_s": statistics.median(reasoning), "status": outcome[0], "detail": outcome[1]}


def _pattern(name: str):
    sys.path.insert(0, str(REPO / "tests"))
    from shapes import test_strided_patterns as corpus
    import torch
    make, shape, spec, _ = corpus.CASES[name]
    torch.manual_seed(0)
    return make().eval(), corpus._example(name, shape), spec


def _timed_outcome(export: Callable[[], Any]) -> tuple[float, str]:
    start = time.perf_counter()
    try:
        export()
        outcome = "exports"
    except Exception as error:   # noqa: BLE001 (torch.export raises several types)
        outcome = f"refuses ({type(error).__name__})"
    return time.perf_counter() - start, outcome


def _measure_pattern(name: str, rounds: int) -> dict[str, Any]:
    import torch
    import graphport as gp

    model, example, spec = _pattern(name)

    def ours() -> Any:
        return gp.export(model, (example,), dynamic_shapes=spec(gp)())

    def theirs() -> Any:
        return torch.export.export(model, (example,), dynamic_shapes=spec(torch.export)())

    _reset_algebra_caches()
    _timed_outcome(ours)
    _timed_outcome(theirs)
    times: dict[str, list[float]] = {"graphport": [], "reasoning": [], "torch": []}
    outcomes = {}
    for i in range(rounds):
        for which in (["graphport", "torch"] if i % 2 == 0 else ["torch", "graphport"]):
            if which == "torch":
                elapsed, outcomes["torch"] = _timed_outcome(theirs)
                times["torch"].append(elapsed)
                continue
            _reset_algebra_caches()
            total = [0.0]
            with _timed_shape_env(total):
                elapsed, outcomes["graphport"] = _timed_outcome(ours)
            times["graphport"].append(elapsed)
            times["reasoning"].append(total[0])
    return {"model": name, **{f"{k}_s": statistics.median(v) for k, v in times.items()},
            "graphport": outcomes["graphport"], "torch": outcomes["torch"]}


def _pattern_table(rows: list[tuple[dict, dict | None]]) -> str:
    lines = ["| pattern | graphport | graphport s | of which reasoning s | torch.export | torch.export s | "
             "graphport / torch.export | graphport s before |\n|" + "---|" * 8]
    for after, before in rows:
        if "graphport_s" not in after:
            lines.append(f"| {after['model']} | {after['status']} |" + " - |" * 6)
            continue
        earlier = _fmt(before["graphport_s"]) + f" ({before['graphport']})" if before and "graphport_s" in before \
            else "-"
        lines.append(f"| {after['model']} | {after['graphport']} | {_fmt(after['graphport_s'])} | "
                     f"{_fmt(after['reasoning_s'])} | {after['torch']} | {_fmt(after['torch_s'])} | "
                     f"{_fmt(after['graphport_s'] / after['torch_s'])} | {earlier} |")
    return "\n".join(lines)


# --------------------------------------------------------------------------- driving (parent)

def _run_child(src: Path, name: str, rounds: int, timeout: float, pattern: bool = False) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{REPO}"}
    command = [sys.executable, __file__, "--child", name, "--rounds", str(rounds)] + (["--patterns"] if pattern else [])
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"model": name, "status": f"timeout ({timeout:.0f} s)"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"model": name, "status": "crash", "detail": done.stderr.strip().splitlines()[-1:]}
    return json.loads(lines[-1])


def _fmt(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else "-"


def _table(rows: list[tuple[dict, dict | None]]) -> str:
    header = ("| model | before: static s | before: dynamic s | before: reasoning s | before: dyn/static | "
              "after: static s | after: dynamic s | after: reasoning s | after: dyn/static | reasoning after/before "
              "| outcome (after) |\n|" + "---|" * 11)
    lines = [header]
    for after, before in rows:
        cells = [after["model"]]
        for r in (before, after):
            if r and "dynamic_s" in r:
                cells += [_fmt(r["static_s"]), _fmt(r["dynamic_s"]), _fmt(r["reasoning_s"]),
                          _fmt(r["dynamic_s"] / r["static_s"])]
            else:
                cells += ["-", "-", "-", r["status"] if r else "-"]
        ratio = (after["reasoning_s"] / before["reasoning_s"]
                 if before and "reasoning_s" in before and "reasoning_s" in after and before["reasoning_s"] else None)
        cells.append(_fmt(ratio))
        cells.append(after["status"] + (f": {after['detail']}" if after.get("detail") else ""))
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def _write_section(text: str, section: str = SECTION) -> None:
    path = REPO / "bench" / "RESULTS.md"
    current = path.read_text()
    if section in current:
        start = current.index(section)
        end = current.find("\n## ", start + len(section))
        current = current[:start] + text + ("\n" + current[end + 1:] if end != -1 else "")
    else:
        current = current.rstrip("\n") + "\n\n" + text
    path.write_text(current)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="src/ of the graphport checkout to compare against")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--models", nargs="*", default=TRANSFORMERS + ZOO_DYNAMIC_SIZE)
    parser.add_argument("--timeout", type=float, default=1200)
    parser.add_argument("--write", action="store_true", help="replace this script's section of bench/RESULTS.md")
    parser.add_argument("--before-label", default="the --before checkout", help="what --before is, for RESULTS.md")
    parser.add_argument("--patterns", nargs="*", help="corpus patterns to time against torch.export ('all': every one)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        measure = _measure_pattern if options.patterns is not None else _measure
        print(json.dumps(measure(options.child, options.rounds)), flush=True)
        return
    if options.patterns is not None:
        _main_patterns(options)
        return
    rows = []
    for i, name in enumerate(options.models):
        order = ["before", "after"] if i % 2 == 0 else ["after", "before"]
        results: dict[str, Any] = {}
        for which in order:
            if which == "before" and not options.before:
                continue
            src = options.before if which == "before" else REPO / "src"
            results[which] = _run_child(src, name, options.rounds, options.timeout)
            print(which, json.dumps(results[which]), flush=True)
        rows.append((results["after"], results.get("before")))
    table = _table(rows)
    print(table)
    if options.write:
        command = "python bench/shape_reasoning.py" + (f" --before {options.before}" if options.before else "") + \
            f" --rounds {options.rounds}" + (f" --models {' '.join(options.models)}" if options.models != \
                                            TRANSFORMERS + ZOO_DYNAMIC_SIZE else "")
        _write_section(f"{SECTION}\n\nMedians of {options.rounds} rounds per model, one process per checkout and "
                       f"model, checkouts alternating (`{command}`). \"reasoning\" is the time inside the shape "
                       "environment (deciding, simplifying, size arithmetic) during the dynamic export; "
                       f"\"before\" is {options.before_label}. Images are dynamic in batch, height and width "
                       f"({IMAGE_RANGE[0]}..{IMAGE_RANGE[1]}), audio in batch and length "
                       f"({AUDIO_RANGE[0]}..{AUDIO_RANGE[1]}); zoo models use bench/zoo.py's dynamic specs.\n\n"
                       f"{table}\n")


def _main_patterns(options: argparse.Namespace) -> None:
    names = options.patterns
    if names in ([], ["all"]):
        sys.path.insert(0, str(REPO / "tests"))
        from shapes.test_strided_patterns import CASES
        names = list(CASES)
    rows = []
    for i, name in enumerate(names):   # checkouts alternate which runs first, as machine load drifts
        results: dict[str, Any] = {}
        for which in (["after", "before"] if i % 2 == 0 else ["before", "after"]):
            if which == "after" or options.before:
                src = REPO / "src" if which == "after" else options.before
                results[which] = _run_child(src, name, options.rounds, options.timeout, pattern=True)
        after, before = results["after"], results.get("before")
        print(json.dumps(after), json.dumps(before), flush=True)
        rows.append((after, before))
    table = _pattern_table(rows)
    print(table)
    if options.write:
        command = "python bench/shape_reasoning.py --patterns " + " ".join(options.patterns) + \
            (f" --before {options.before}" if options.before else "") + f" --rounds {options.rounds}"
        _write_section(f"{PATTERN_SECTION}\n\nMedians of {options.rounds} rounds, graphport and torch.export "
                       f"alternating in one process per pattern (`{command}`). A refusal is timed like an export. "
                       "\"reasoning\" is graphport's time inside the shape environment; \"before\" is graphport "
                       "at the checkout given with --before.\n\n" + table + "\n", PATTERN_SECTION)


if __name__ == "__main__":
    main()
