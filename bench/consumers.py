"""torch.export's consumers run on graphport's programs and on torch.export's, side by side.

For each model (bench/consumer_models.py), static and with a dynamic batch, the program from
`graphport.interop.to_torch(gp.export(...))` and the one from `torch.export.export(...)` are
handed to each consumer: torch.export.save/load, Model Explorer's PyTorch adapter (in memory
and from a .pt2 file), torchao PT2E quantization (X86 and XNNPACK quantizers: the count of
quantize/dequantize nodes), OpenVINO, ExecuTorch with XNNPACK, torch.compile of module() and
AOTInductor. Where a consumer runs the program, its outputs are compared with eager at two
batch sizes (one when static). The tests in tests/backends/ call the same functions.

    PYTHONPATH=src python bench/consumers.py                      # cheap consumers, all models
    PYTHONPATH=src python bench/consumers.py --all --markdown     # every consumer: the table in docs/backends.md
"""
from __future__ import annotations

import argparse
import io
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import consumer_models  # noqa: E402

import graphport as gp  # noqa: E402


# -- programs -------------------------------------------------------------------------------------

def torch_program(case: consumer_models.Case, dynamic: bool) -> torch.export.ExportedProgram:
    spec = ({0: torch.export.Dim("batch", min=1, max=case.batch_max)},) if dynamic else None
    return torch.export.export(case.module, case.inputs(2), dynamic_shapes=spec)


def graphport_program(case: consumer_models.Case, dynamic: bool) -> gp.ExportedProgram:
    spec = ({0: gp.Dim("batch", min=1, max=case.batch_max)},) if dynamic else None
    return gp.export(case.module, case.inputs(2), dynamic_shapes=spec)


def converted(ep: gp.ExportedProgram, through_file: bool = False) -> torch.export.ExportedProgram:
    """graphport's program in torch.export's form, optionally saved and loaded by graphport first."""
    from graphport.interop import to_torch
    if through_file:
        with tempfile.TemporaryDirectory() as tmp:
            gp.save(ep, Path(tmp) / "model.gport")
            ep = gp.load(Path(tmp) / "model.gport")
    return to_torch(ep)


def input_sets(case: consumer_models.Case, dynamic: bool) -> list[tuple]:
    return [case.inputs(2)] + ([case.inputs(5)] if dynamic else [])


def eager(case: consumer_models.Case, inputs: tuple) -> list[torch.Tensor]:
    with torch.no_grad():
        return _tensors(case.module(*inputs))


def _tensors(out: Any) -> list[torch.Tensor]:
    return [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]


def assert_close(expected: list[torch.Tensor], actual: list[Any], what: str) -> None:
    actual = [torch.as_tensor(a) for a in actual]
    assert len(expected) == len(actual), f"{what}: {len(actual)} outputs, eager has {len(expected)}"
    for i, (e, a) in enumerate(zip(expected, actual)):
        torch.testing.assert_close(a.to(e.dtype), e, rtol=1e-3, atol=1e-3, msg=lambda m: f"{what}, output {i}: {m}")


# -- consumers: each takes the program and the case, raises if it fails, returns a short result ----

def save_load(ep, case, dynamic) -> str:
    buffer = io.BytesIO()
    torch.export.save(ep, buffer)
    buffer.seek(0)
    loaded = torch.export.load(buffer)
    for inputs in input_sets(case, dynamic):
        assert_close(eager(case, inputs), _tensors(loaded.module()(*inputs)), "the loaded program")
    return "ok"


MODEL_EXPLORER_SETTINGS = {"const_element_count_limit": 16}   # what the Model Explorer app passes


def model_explorer(ep, case, dynamic) -> str:
    from model_explorer.pytorch_exported_program_adapter_impl import PytorchExportedProgramAdapterImpl
    graphs = PytorchExportedProgramAdapterImpl(ep, MODEL_EXPLORER_SETTINGS).convert()["graphs"]
    assert len(graphs[0].nodes) == len(ep.graph.nodes)
    return "ok"


def model_explorer_file(ep, case, dynamic) -> str:
    from model_explorer.builtin_pytorch_exportedprogram_adapter import BuiltinPytorchExportedProgramAdapter
    with tempfile.TemporaryDirectory() as tmp:
        torch.export.save(ep, Path(tmp) / "model.pt2")
        graphs = BuiltinPytorchExportedProgramAdapter().convert(str(Path(tmp) / "model.pt2"),
                                                                MODEL_EXPLORER_SETTINGS)["graphs"]
    assert len(graphs[0].nodes) == len(ep.graph.nodes)
    return "ok"


QDQ_NAMES = ("quantize_per_tensor", "dequantize_per_tensor", "quantize_per_channel", "dequantize_per_channel")


def _quantize(ep, case, quantizer) -> str:
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    prepared = prepare_pt2e(ep.module(), quantizer)
    prepared(*case.inputs(2))
    quantized = convert_pt2e(prepared)
    count = sum(1 for n in quantized.graph.nodes
                if n.op == "call_function" and getattr(n.target, "__name__", "").split(".")[0] in QDQ_NAMES)
    with torch.no_grad():
        quantized(*case.inputs(2))
    return f"{count} q/dq"


def quantize_x86(ep, case, dynamic) -> str:
    from torchao.quantization.pt2e.quantizer.x86_inductor_quantizer import (
        X86InductorQuantizer, get_default_x86_inductor_quantization_config)
    quantizer = X86InductorQuantizer()
    quantizer.set_global(get_default_x86_inductor_quantization_config())
    return _quantize(ep, case, quantizer)


def quantize_xnnpack(ep, case, dynamic) -> str:
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer, get_symmetric_quantization_config)
    quantizer = XNNPACKQuantizer()
    quantizer.set_global(get_symmetric_quantization_config())
    return _quantize(ep, case, quantizer)


def openvino(ep, case, dynamic) -> str:
    import openvino as ov
    # f32 throughout: OpenVINO may otherwise run in bf16 where the CPU has it
    compiled = ov.compile_model(ov.convert_model(ep), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    for inputs in input_sets(case, dynamic):
        result = compiled([t.numpy() for t in inputs])
        assert_close(eager(case, inputs), [torch.from_numpy(result[i]) for i in range(len(compiled.outputs))],
                     "OpenVINO")
    return "ok"


def executorch_xnnpack(ep, case, dynamic) -> str:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from executorch.runtime import Runtime
    program = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch()
    method = Runtime.get().load_program(program.buffer).load_method("forward")
    for inputs in input_sets(case, dynamic):
        assert_close(eager(case, inputs), method.execute(list(inputs)), "ExecuTorch")
    return "ok"


def torch_compile(ep, case, dynamic) -> str:
    torch._dynamo.reset()
    compiled = torch.compile(ep.module(), dynamic=dynamic or None)
    for inputs in input_sets(case, dynamic):
        with torch.no_grad():
            assert_close(eager(case, inputs), _tensors(compiled(*inputs)), "torch.compile")
    return "ok"


def aoti(ep, case, dynamic) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        path = torch._inductor.aoti_compile_and_package(ep, package_path=str(Path(tmp) / "model.pt2"))
        runner = torch._inductor.aoti_load_package(path)
        for inputs in input_sets(case, dynamic):
            assert_close(eager(case, inputs), _tensors(runner(*inputs)), "AOTInductor")
    return "ok"


CHEAP: dict[str, Callable] = {"save/load": save_load, "model-explorer": model_explorer,
                              "model-explorer .pt2": model_explorer_file, "torchao-x86": quantize_x86,
                              "torchao-xnnpack": quantize_xnnpack, "openvino": openvino}
HEAVY: dict[str, Callable] = {"executorch": executorch_xnnpack, "torch.compile": torch_compile, "aoti": aoti}


def attempt(consumer: Callable, ep, case, dynamic) -> str:
    try:
        return consumer(ep, case, dynamic)
    except Exception as e:  # noqa: BLE001 (the table records any failure of a consumer)
        first = (str(e).strip().splitlines() or [""])[0]
        return f"FAIL {type(e).__name__}: {first[:120]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", default=list(consumer_models.BUILDERS))
    parser.add_argument("--consumers", nargs="*", default=None, help="names (default: the cheap ones)")
    parser.add_argument("--all", action="store_true", help="also ExecuTorch, torch.compile and AOTInductor")
    parser.add_argument("--markdown", action="store_true", help="print the table for docs/backends.md")
    parser.add_argument("--verbose", action="store_true", help="print tracebacks of failures")
    args = parser.parse_args()
    everything = {**CHEAP, **HEAVY}
    names = args.consumers or list(everything if args.all else CHEAP)
    rows, passed = [], {"graphport": 0, "torch.export": 0}
    start = time.perf_counter()
    for model in args.models:
        for dynamic in (False, True):
            case = consumer_models.build(model)
            programs = {"torch.export": lambda: torch_program(case, dynamic),
                        "graphport": lambda: converted(graphport_program(case, dynamic))}
            built = {}
            for who, make in programs.items():
                try:
                    built[who] = make()
                except Exception as e:  # noqa: BLE001
                    built[who] = e
            for name in names:
                cells = {}
                for who, ep in built.items():
                    cells[who] = (f"FAIL export: {ep}"[:80] if isinstance(ep, Exception)
                                  else attempt(everything[name], ep, case, dynamic))
                    passed[who] += not cells[who].startswith("FAIL")
                    if args.verbose and cells[who].startswith("FAIL") and not isinstance(ep, Exception):
                        traceback.print_exc()
                rows.append((model, "dynamic" if dynamic else "static", name, cells["graphport"],
                             cells["torch.export"]))
                print(f"{model:12} {rows[-1][1]:8} {name:16} graphport: {cells['graphport']:40} "
                      f"torch.export: {cells['torch.export']}", flush=True)
    total = len(rows)
    print(f"\naccepted: graphport {passed['graphport']}/{total}, torch.export {passed['torch.export']}/{total} "
          f"({time.perf_counter() - start:.0f} s); the same result as torch.export's program: "
          f"{sum(r[3] == r[4] for r in rows)}/{total}")
    if args.markdown:
        print(markdown(rows))


def cell(ours: str, theirs: str) -> str:
    """One table cell: both results when they differ, else the shared one; a failure by its
    exception type (the printed lines above give the message)."""
    ours, theirs = (r.split(":")[0] if r.startswith("FAIL") else r for r in (ours, theirs))
    if ours == theirs:
        return f"{ours} (both)" if ours.startswith("FAIL") else ours
    return f"graphport: {ours}; torch.export: {theirs}"


def markdown(rows: list[tuple[str, str, str, str, str]]) -> str:
    """Rows (model, batch, consumer, graphport's result, torch.export's) as one table, a row per
    model and batch, a column per consumer."""
    names = list(dict.fromkeys(r[2] for r in rows))
    table: dict[tuple[str, str], dict[str, str]] = {}
    for model, batch, name, ours, theirs in rows:
        table.setdefault((model, batch), {})[name] = cell(ours, theirs)
    lines = ["| model | batch | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    lines += [f"| {m} | {b} | " + " | ".join(cells.get(n, "") for n in names) + " |" for (m, b), cells in table.items()]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
