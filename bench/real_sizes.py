"""Export cost, call latency and memory at the models' published sizes.

Why beside the toy zoo: the zoo's models have 0.1 to 0.4M parameters, where export cost is
all per-op overhead and weights are free. At real sizes the figures that matter are
whether export stays cheap next to torch.export, whether `ep.module()` adds anything to a
forward that takes milliseconds, and whether export ever copies weights.

Models (transformers configs, random weights): BERT-base, GPT-2 124M, ResNet-50, ViT-B/16,
T5-small, Whisper-tiny and a LLaMA with 7B dimensions and 2 layers on the CPU; the LLaMA-7B
and LLaMA-70B configs on device="meta" (export only: there is nothing to run).

Each model runs in its own process. Inside it, every round runs graphport's static
export, torch.export, the meta forward (the model's own Python code on shape-only tensors:
the cheapest trace any exporter could do), then the dynamic exports of both, in that
order; the figure is the median over the rounds after a warm-up round. Latency: eager,
graphport's `ep.module()` and torch.export's `ep.module()` alternate call by call, median
of `--calls`. Memory: the peak increase of the process's resident set while one export
runs (sampled every 5 ms), for each exporter's first export of the model in the process (after
both warmed up on a tiny model), against the weights' bytes.

    .venv/bin/python bench/real_sizes.py [--models bert_base,gpt2] [--repeats 3] [--calls 3]
                                         [--no-dynamic] [--timeout 1800]

Writes the "real-sizes" (CPU) and "real-sizes-meta" sections of bench/RESULTS.md.
"""
from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

import torch  # noqa: E402

from bench import harness  # noqa: E402
from bench.harness import fmt, median  # noqa: E402

Inputs = tuple[tuple[Any, ...], dict[str, Any]]
BATCH = 2   # not 1: a size-1 example would pin a batch Dim to 1 in both exporters
TARGET_VS_TORCH, TARGET_CALL_VS_EAGER, MEMORY_FRACTION, MEMORY_FIXED_MIB = 0.1, 1.02, 0.05, 200


@dataclass
class Model:
    """A model built on a device, its example inputs and its dynamic-shape spec (Dim factory -> spec)."""

    module: torch.nn.Module
    inputs: Inputs
    dynamic_shapes: Callable[[Callable[..., Any]], Any] | None


def _text(module: torch.nn.Module, device: str, vocab: int, seq: int, max_seq: int, mask: bool = True) -> Model:
    kwargs = {"input_ids": torch.randint(0, vocab, (BATCH, seq), device=device)}
    if mask:
        kwargs["attention_mask"] = torch.ones(BATCH, seq, dtype=torch.long, device=device)

    def spec(dim: Callable[..., Any]) -> Any:
        axes = {0: dim("batch", min=1, max=64), 1: dim("seq", min=2, max=max_seq)}
        return {name: axes for name in kwargs}

    return Model(module, ((), kwargs), spec)


def _images(module: torch.nn.Module, device: str) -> Model:
    def spec(dim: Callable[..., Any]) -> Any:
        return {"pixel_values": {0: dim("batch", min=1, max=64)}}

    return Model(module, ((), {"pixel_values": torch.randn(BATCH, 3, 224, 224, device=device)}), spec)


def bert_base(device: str) -> Model:
    from transformers import BertConfig, BertModel
    with torch.device(device):
        return _text(BertModel(BertConfig()), device, 30522, 128, 512)


def gpt2(device: str) -> Model:
    from transformers import GPT2Config, GPT2Model
    with torch.device(device):
        return _text(GPT2Model(GPT2Config(use_cache=False)), device, 50257, 128, 1024)


def resnet50(device: str) -> Model:
    from transformers import ResNetConfig, ResNetModel
    with torch.device(device):
        return _images(ResNetModel(ResNetConfig()), device)   # the config's defaults are ResNet-50's


def vit_b16(device: str) -> Model:
    from transformers import ViTConfig, ViTModel
    with torch.device(device):
        return _images(ViTModel(ViTConfig(), add_pooling_layer=False), device)   # defaults: ViT-B/16 at 224


def t5_small(device: str) -> Model:
    from transformers import T5Config, T5Model
    cfg = T5Config(d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_decoder_layers=6, num_heads=8, use_cache=False)
    with torch.device(device):
        module = T5Model(cfg)
    kwargs = {"input_ids": torch.randint(0, cfg.vocab_size, (BATCH, 128), device=device),
              "decoder_input_ids": torch.randint(0, cfg.vocab_size, (BATCH, 32), device=device)}

    def spec(dim: Callable[..., Any]) -> Any:
        b = dim("batch", min=1, max=64)
        return {"input_ids": {0: b, 1: dim("seq", min=2, max=512)},
                "decoder_input_ids": {0: b, 1: dim("dec_seq", min=2, max=512)}}

    return Model(module, ((), kwargs), spec)


def whisper_tiny(device: str) -> Model:
    """Encoder and decoder; the encoder checks the mel length (3000 frames), so only batch is dynamic."""
    from transformers import WhisperConfig, WhisperModel
    cfg = WhisperConfig(d_model=384, encoder_layers=4, decoder_layers=4, encoder_attention_heads=6,
                        decoder_attention_heads=6, encoder_ffn_dim=1536, decoder_ffn_dim=1536, use_cache=False)
    with torch.device(device):
        module = WhisperModel(cfg)
    kwargs = {"input_features": torch.randn(BATCH, cfg.num_mel_bins, 3000, device=device),
              "decoder_input_ids": torch.randint(0, cfg.vocab_size, (BATCH, 16), device=device)}

    def spec(dim: Callable[..., Any]) -> Any:
        b = dim("batch", min=1, max=64)
        return {"input_features": {0: b}, "decoder_input_ids": {0: b}}

    return Model(module, ((), kwargs), spec)


def _llama(device: str, layers: int, seq: int, **dims: int) -> Model:
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=32000, num_hidden_layers=layers, max_position_embeddings=4096, use_cache=False,
                      **dims)
    with torch.device(device):
        return _text(LlamaForCausalLM(cfg), device, cfg.vocab_size, seq, 4096, mask=False)


LLAMA_7B = dict(hidden_size=4096, intermediate_size=11008, num_attention_heads=32, num_key_value_heads=32)
LLAMA_70B = dict(hidden_size=8192, intermediate_size=28672, num_attention_heads=64, num_key_value_heads=8)


def llama_7b_2_layers(device: str) -> Model:
    return _llama(device, 2, 64, **LLAMA_7B)


def llama_7b(device: str) -> Model:
    return _llama(device, 32, 128, **LLAMA_7B)


def llama_70b(device: str) -> Model:
    return _llama(device, 80, 128, **LLAMA_70B)


# name -> (builder, runs on CPU with real weights); meta-only models are export-only.
MODELS: dict[str, tuple[Callable[[str], Model], bool]] = {
    "bert_base": (bert_base, True),
    "gpt2_124m": (gpt2, True),
    "resnet50": (resnet50, True),
    "vit_b16": (vit_b16, True),
    "t5_small": (t5_small, True),
    "whisper_tiny": (whisper_tiny, True),
    "llama_7b_dims_2_layers": (llama_7b_2_layers, True),
    "llama_7b_meta": (llama_7b, False),
    "llama_70b_meta": (llama_70b, False),
}


def _graphport_dim(name: str, min: int, max: int) -> Any:
    import graphport as gp
    return gp.Dim(name, min=min, max=max)


def _torch_dim(name: str, min: int, max: int) -> Any:
    return torch.export.Dim(name, min=min, max=max)


def _spec(model: Model, make_dim: Callable[..., Any]) -> Any:
    return model.dynamic_shapes(harness.DimFactory(make_dim))


def _meta_forward(meta: Model) -> None:
    """Libraries are told they are being exported, as both exporters tell them, so the meta
    forward takes the same traceable code paths."""
    with torch.no_grad(), mock.patch("torch.compiler.is_compiling", return_value=True), \
            mock.patch("torch.compiler.is_exporting", return_value=True):
        meta.module(*meta.inputs[0], **meta.inputs[1])


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def _export_memory(fn: Callable[[], Any]) -> float:
    """Peak resident-set increase (MiB) while `fn` runs, after collecting earlier garbage."""
    gc.collect()
    with harness.PeakRSS() as rss:
        out = fn()
    del out
    return rss.peak_mib - rss.start_mib


def measure(name: str, repeats: int, calls: int, dynamic: bool) -> dict[str, Any]:
    import graphport as gp

    build, on_cpu = MODELS[name]
    torch.manual_seed(0)
    built = build("cpu" if on_cpu else "meta")
    model, (args, kwargs) = built.module.eval(), built.inputs
    meta = build("meta") if on_cpu else built
    meta.module.eval()
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    row: dict[str, Any] = {"model": name, "params_m": weight_bytes / 4 / 1e6, "weight_mib": weight_bytes / 2**20,
                           "device": "cpu" if on_cpu else "meta", "error": ""}
    steps: dict[str, Callable[[], Any]] = {
        "gp": lambda: gp.export(model, args, kwargs),
        "torch": lambda: torch.export.export(model, args, kwargs),
        "meta": lambda: _meta_forward(meta),
    }
    if dynamic and on_cpu and built.dynamic_shapes is not None:   # on meta: torch's dynamic 70B export alone takes minutes
        gp_spec, torch_spec = _spec(built, _graphport_dim), _spec(built, _torch_dim)
        steps["gp_dyn"] = lambda: gp.export(model, args, kwargs, dynamic_shapes=gp_spec)
        steps["torch_dyn"] = lambda: torch.export.export(model, args, kwargs, dynamic_shapes=torch_spec)
    memory = {key: _export_memory(steps[key]) for key in ("gp", "torch")}   # each exporter's first export
    times: dict[str, list[float]] = {key: [] for key in steps}
    for round_ in range(repeats + 1):   # round 0 warms up this model's code paths
        for key, step in list(steps.items()):
            gc.collect()
            try:
                out, seconds = _timed(step)
            except Exception as exc:
                row["error"] += f"{key}: {type(exc).__name__}: {harness.first_line(str(exc))}; "
                del steps[key]
                continue
            if round_:
                times[key].append(seconds)
            del out
    for key, values in times.items():
        row[f"{key}_s"] = statistics.median(values) if values else None
    row["gp_over_torch"] = _ratio(row.get("gp_s"), row.get("torch_s"))
    row["gp_over_meta"] = _ratio(row.get("gp_s"), row.get("meta_s"))
    row["gp_dyn_over_static"] = _ratio(row.get("gp_dyn_s"), row.get("gp_s"))
    row["gp_dyn_over_torch_dyn"] = _ratio(row.get("gp_dyn_s"), row.get("torch_dyn_s"))
    row["gp_rss_mib"], row["torch_rss_mib"] = memory["gp"], memory["torch"]
    row["rss_budget_mib"] = MEMORY_FRACTION * row["weight_mib"] + MEMORY_FIXED_MIB
    if on_cpu and "gp" in steps:
        row.update(_latency(model, args, kwargs, steps, calls))
    return row


def _latency(model: torch.nn.Module, args: tuple, kwargs: dict, steps: dict, calls: int) -> dict[str, Any]:
    """Eager against both exported modules, alternating call by call; plus graphport's max abs diff."""
    out: dict[str, Any] = {}
    runners = {"eager": model, "gp_module": steps["gp"]().module()}
    if "torch" in steps:
        runners["torch_module"] = steps["torch"]().module()
    times: dict[str, list[float]] = {key: [] for key in runners}
    with torch.no_grad():
        expected = model(*args, **kwargs)
        ok, diff, reason = harness.compare(expected, runners["gp_module"](*args, **kwargs))
        out["gp_max_diff"], out["gp_matches"] = diff, ok
        if not ok:
            out["error"] = f"graphport module differs from eager: {reason}"
        for key, run in runners.items():   # warm-up
            run(*args, **kwargs)
        for _ in range(calls):
            for key, run in runners.items():
                times[key].append(_timed(lambda: run(*args, **kwargs))[1])
    for key, values in times.items():
        out[f"{key}_ms"] = 1e3 * statistics.median(values)
    out["gp_call_over_eager"] = _ratio(out.get("gp_module_ms"), out.get("eager_ms"))
    out["torch_call_over_eager"] = _ratio(out.get("torch_module_ms"), out.get("eager_ms"))
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def render_cpu(rows: list[dict[str, Any]], opts: argparse.Namespace) -> str:
    lines = [
        "## Real sizes (CPU, random weights)",
        "",
        harness.stamp(),
        "",
        _method(opts),
        "",
        "| model | params (M) | gp export s | torch.export s | meta forward s | gp / torch | gp / meta | "
        "gp dynamic s | torch dynamic s | gp dyn / static | gp dyn / torch dyn | eager ms | gp module / eager | "
        "torch module / eager | gp +RSS MiB | torch +RSS MiB | budget MiB | gp max diff | notes |",
        "|" + "---|" * 19,
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {fmt(r.get('params_m'))} | {fmt(r.get('gp_s'))} | {fmt(r.get('torch_s'))} | "
            f"{fmt(r.get('meta_s'))} | {fmt(r.get('gp_over_torch'))} | {fmt(r.get('gp_over_meta'))} | "
            f"{fmt(r.get('gp_dyn_s'))} | {fmt(r.get('torch_dyn_s'))} | {fmt(r.get('gp_dyn_over_static'))} | "
            f"{fmt(r.get('gp_dyn_over_torch_dyn'))} | {fmt(r.get('eager_ms'))} | {fmt(r.get('gp_call_over_eager'))} | "
            f"{fmt(r.get('torch_call_over_eager'))} | {fmt(r.get('gp_rss_mib'))} | {fmt(r.get('torch_rss_mib'))} | "
            f"{fmt(r.get('rss_budget_mib'))} | {fmt(r.get('gp_max_diff'))} | {_note(r)} |")
    lines += ["", "Summary:", ""] + _summary(rows, with_calls=True)
    return "\n".join(lines)


def render_meta(rows: list[dict[str, Any]], opts: argparse.Namespace) -> str:
    lines = [
        "## Real sizes on the meta device (LLaMA-7B, LLaMA-70B)",
        "",
        harness.stamp(),
        "",
        _method(opts) + " Nothing runs: the weights exist only as shapes, so there is no latency column.",
        "",
        "| model | params (M) | gp export s | torch.export s | meta forward s | gp / torch | gp / meta | "
        "gp dynamic s | torch dynamic s | gp dyn / static | gp dyn / torch dyn | gp +RSS MiB | torch +RSS MiB | notes |",
        "|" + "---|" * 14,
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {fmt(r.get('params_m'))} | {fmt(r.get('gp_s'))} | {fmt(r.get('torch_s'))} | "
            f"{fmt(r.get('meta_s'))} | {fmt(r.get('gp_over_torch'))} | {fmt(r.get('gp_over_meta'))} | "
            f"{fmt(r.get('gp_dyn_s'))} | {fmt(r.get('torch_dyn_s'))} | {fmt(r.get('gp_dyn_over_static'))} | "
            f"{fmt(r.get('gp_dyn_over_torch_dyn'))} | {fmt(r.get('gp_rss_mib'))} | {fmt(r.get('torch_rss_mib'))} | "
            f"{_note(r)} |")
    lines += ["", "Summary:", ""] + _summary(rows, with_calls=False)
    return "\n".join(lines)


def _method(opts: argparse.Namespace) -> str:
    return (f"One process per model; inside it each round runs graphport's static export, torch.export, the meta "
            f"forward{', and both dynamic exports (batch and sequence Dims where the model allows; CPU models only)' if opts.dynamic else ''}; "
            f"figures are medians of {opts.repeats} rounds after a warm-up round. Latencies: eager and both "
            f"`ep.module()`s alternate call by call under `torch.no_grad()`, median of {opts.calls}. +RSS: the "
            f"process's peak resident-set increase during each exporter's first export of the model; budget: {MEMORY_FRACTION:.0%} of the weight "
            f"bytes + {MEMORY_FIXED_MIB} MiB.")


def _note(r: dict[str, Any]) -> str:
    note = r.get("error") or ("" if r.get("process", harness.OK) == harness.OK else f"worker {r['process']}")
    return harness.first_line(note, 200).replace("|", "/")


def _summary(rows: list[dict[str, Any]], with_calls: bool) -> list[str]:
    def verdict(value: float | None, target: float) -> str:
        return "no data" if value is None else ("meets" if value <= target else "misses")

    vs_torch = median([r.get("gp_over_torch") for r in rows])
    lines = [f"- median graphport / torch.export: **{fmt(vs_torch)}** "
             f"(target <= {TARGET_VS_TORCH}: {verdict(vs_torch, TARGET_VS_TORCH)})",
             f"- median graphport / meta forward: **{fmt(median([r.get('gp_over_meta') for r in rows]))}**",
             f"- median graphport dynamic / static: **{fmt(median([r.get('gp_dyn_over_static') for r in rows]))}**; "
             f"graphport dynamic / torch.export dynamic: "
             f"**{fmt(median([r.get('gp_dyn_over_torch_dyn') for r in rows]))}**"]
    if with_calls:
        calls = median([r.get("gp_call_over_eager") for r in rows])
        lines.append(f"- median graphport `ep.module()` / eager: **{fmt(calls)}** "
                     f"(target <= {TARGET_CALL_VS_EAGER}: {verdict(calls, TARGET_CALL_VS_EAGER)}); torch.export's "
                     f"module / eager: **{fmt(median([r.get('torch_call_over_eager') for r in rows]))}**")
    within = [r["model"] for r in rows if r.get("gp_rss_mib") is not None and r["gp_rss_mib"] <= r["rss_budget_mib"]]
    measured = [r for r in rows if r.get("gp_rss_mib") is not None]
    lines.append(f"- graphport's export memory within {MEMORY_FRACTION:.0%} of the weights + {MEMORY_FIXED_MIB} MiB: "
                 f"**{len(within)}/{len(measured)}** models")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--no-dynamic", dest="dynamic", action="store_false")
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("out", nargs="?", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    torch.set_num_threads(1)
    if opts.worker:
        from bench import measure as common
        common.warm_up_exporters()
        row = measure(opts.worker, opts.repeats, opts.calls, opts.dynamic)
        Path(opts.out).write_text(json.dumps(row))
        return
    rows = []
    for name in opts.models.split(","):
        out = Path(tempfile.mkdtemp()) / f"{name}.json"
        argv = [sys.executable, str(Path(__file__).resolve()), "--worker", name, "--repeats", str(opts.repeats),
                "--calls", str(opts.calls), *([] if opts.dynamic else ["--no-dynamic"]), str(out)]
        row = {"model": name, **harness.run_isolated(argv, opts.timeout)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    cpu = [r for r in rows if MODELS[r["model"]][1]]
    meta = [r for r in rows if not MODELS[r["model"]][1]]
    if cpu:
        harness.write_section(harness.RESULTS_MD, "real-sizes", render_cpu(cpu, opts), "Benchmark results")
    if meta:
        harness.write_section(harness.RESULTS_MD, "real-sizes-meta", render_meta(meta, opts), "Benchmark results")


if __name__ == "__main__":
    main()
