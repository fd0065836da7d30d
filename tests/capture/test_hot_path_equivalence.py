"""Capture's per-node shortcuts give what the plain computations give.

- `UserStacks` (source.py) remembers the user frames outside the innermost one; its answer
  must be the full walk's (`user_stack`), including where a generator's frame is resumed from
  another caller, a loop records from one line, and no user frame is on the stack.
- The meta-cache key (capture/meta_cache.py) takes static sizes as they are; a program
  exported with the key spelled out size by size must print and carry the same metadata.
  The same holds with each node's stack walked in full.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

import graphport as gp
from graphport import source
from graphport.capture import meta_cache, recorder

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # bench/ lives at the repo root

# Stand-ins for capture's own frames between the program and the stack walk: code whose file
# is inside graphport (internal), or inside torch.nn (the stand-in location with no user frame).
_GRAPHPORT_FILE = os.path.join(os.path.dirname(source.__file__), "stack_probe.py")
_TORCH_NN_FILE = os.path.join(os.path.dirname(torch.nn.__file__), "stack_probe.py")
_PROBE = "def probe(stacks, stop_at):\n    return stacks(), source.user_stack(stop_at)\n"


def _probe(filename: str, first_line: int):
    """Code objects equal but for their file compare equal (and share the walk's cached kind):
    each probe starts on a line of its own."""
    scope = {"source": source}
    exec(compile("\n" * first_line + _PROBE, filename, "exec"), scope)
    return scope["probe"]


probe = _probe(_GRAPHPORT_FILE, 0)
nn_probe = _probe(_TORCH_NN_FILE, 1)


def _agree(pairs) -> list:
    for remembered, walked in pairs:
        assert remembered == walked
    return [remembered for remembered, _ in pairs]


def test_one_frame_many_lines_and_a_loop():
    stop = sys._getframe(0)
    stacks = source.UserStacks(stop)

    def layer():
        found = [probe(stacks, stop)]
        for _ in range(3):
            found.append(probe(stacks, stop))
        found.append(probe(stacks, stop))
        return found

    def model():
        return layer() + layer() + [probe(stacks, stop)]

    seen = _agree(model())
    assert [loc.function for loc in seen[0]] == ["model", "layer"]
    assert seen[1] == seen[2] and seen[0][-1].lineno != seen[1][-1].lineno
    assert seen[-1][-1].function == "model"


def test_generator_resumed_from_other_callers():
    stop = sys._getframe(0)
    stacks = source.UserStacks(stop)

    def steps():
        while True:
            yield probe(stacks, stop)

    gen = steps()

    def first_caller():
        return next(gen)

    def second_caller():
        return next(gen)

    seen = _agree([first_caller(), second_caller(), first_caller(), next(gen)])
    assert [loc.function for loc in seen[0]] == ["first_caller", "steps"]
    assert [loc.function for loc in seen[1]] == ["second_caller", "steps"]
    assert [loc.function for loc in seen[3]] == ["steps"]


def test_plain_frame_called_from_a_generator():
    stop = sys._getframe(0)
    stacks = source.UserStacks(stop)

    def helper():
        return probe(stacks, stop)

    def steps():
        while True:
            yield helper()

    gen = steps()

    def caller_a():
        return next(gen)

    def caller_b():
        return next(gen)

    seen = _agree([caller_a(), caller_b(), caller_a()])
    assert seen[0][0].function == "caller_a" and seen[1][0].function == "caller_b"


def test_no_user_frame():
    def inside():
        here = sys._getframe(0)
        stacks = source.UserStacks(here)
        return [probe(stacks, here), nn_probe(stacks, here)]

    plain, nn = _agree(inside())
    assert plain == ()
    assert len(nn) == 1 and nn[0].filename == _TORCH_NN_FILE


class _WalkedInFull:
    """UserStacks without the remembered frames: the full walk at every node."""

    def __init__(self, stop_at):
        self.stop_at = stop_at

    def __call__(self):
        return source._walk(sys._getframe(1), self.stop_at)


def _describe_size_by_size(t: torch.Tensor) -> tuple:
    size = meta_cache._size_key
    return ("T", tuple(size(s) for s in t.shape), tuple(size(s) for s in t.stride()), size(t.storage_offset()),
            t.dtype, t.device.type)


def _printed(ep) -> list:
    """The program as text, and each node's metadata that capture's shortcuts feed."""
    out = [str(ep)]
    for node in ep.graph.nodes:
        val = node.meta.get("val")
        vals = val if isinstance(val, (list, tuple)) else [val]
        out.append((node.name, node.meta.get("stack_trace"), str(node.meta.get("nn_module_stack")),
                    str(node.meta.get("source_fn_stack")), node.meta.get("torch_fn"),
                    [(str(v.shape), v.stride(), v.storage_offset(), v.dtype, str(v.device))
                     if isinstance(v, torch.Tensor) else repr(v) for v in vals]))
    return out


def _exports(name: str, dynamic: bool):
    from bench import measure, zoo

    built = zoo.MODELS[name].build()
    args, kwargs = built.example_inputs()
    shapes = measure.dynamic_spec(built, "graphport") if dynamic else None
    return lambda: _printed(gp.export(built.module, args, kwargs, dynamic_shapes=shapes))


@pytest.mark.parametrize("name,dynamic", [("bert", False), ("llama", False), ("resnet50", False),
                                          ("gpt2", True)])
def test_zoo_programs_unchanged(name, dynamic, monkeypatch):
    export = _exports(name, dynamic)
    fast = export()
    monkeypatch.setattr(meta_cache, "_describe", _describe_size_by_size)
    monkeypatch.setattr(recorder, "UserStacks", _WalkedInFull)
    assert export() == fast


def test_identical_functions_in_two_files_keep_their_own_file(tmp_path):
    """Code objects compare equal across files (equality ignores co_filename): the stack caches
    must still give each node the file its function was written in, and the audit must still
    classify each by its own file."""
    source = "def scale(x):\n    return x * 2\n"
    functions = []
    for name in ("first_file.py", "second_file.py"):
        path = tmp_path / name
        path.write_text(source)
        namespace: dict = {}
        exec(compile(source, str(path), "exec"), namespace)
        functions.append(namespace["scale"])
    assert functions[0].__code__ == functions[1].__code__

    class TwoFiles(torch.nn.Module):
        def forward(self, x):
            return functions[1](functions[0](x))

    ep = gp.export(TwoFiles(), (torch.randn(3),))
    files = [node.meta["stack_trace"].strip().splitlines()[-2] for node in ep.graph.nodes
             if node.op == "call_function"]
    assert len(files) == 2
    assert "first_file.py" in files[0] and "second_file.py" in files[1], files
