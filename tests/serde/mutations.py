"""Mutated archives for fuzzing load: byte flips and truncations of the whole file, and
structural edits of graphport.json and the safetensors header repacked into a valid zip
(so the edits get past the checksums and reach the decoders).

`try_archive` is one fuzz case: load the mutant (from a file object or from a path, where
the weights are memory-mapped), and if it loads, print it and run it on the original's
example inputs. Load either refuses with ArtifactError or returns a program that prints
and runs, or refuses the inputs with a call-time error the program states; any other
exception escapes, for the caller to report."""
from __future__ import annotations

import io
import json
import os
import random
import struct
import tempfile
import zipfile
from typing import Any

import torch

import graphport as gp
from graphport import _torch
from graphport.errors import CallSignatureError, InputMismatchError, RuntimeCheckError

# What a loaded program may raise when called: the inputs do not fit what it states (a
# mutated range, shape or structure), or one of its run-time checks fails. Nothing else.
CALL_REFUSALS = (InputMismatchError, CallSignatureError, RuntimeCheckError)
OUTCOMES = ("refused", "ran", "refused_inputs")

_VALUES: list[Any] = [None, True, False, 0, -1, 1, 2**63, -2**70, 1.5, "", "x", "aten::add.Tensor", "s0", "inf",
                      [], {}, [1, 2], {"node": "x"}, {"tuple": []}, {"sym": {"type": "int", "expr": ["sym", "s9"]}},
                      {"tensor": {"dtype": "float32", "shape": [-1], "stride": [1]}}, ["floordiv", ["int", 1], ["int", 0]],
                      {"dtype": "nope"}, {"device": "cuda:99"}, ["sym", "s0"], "*", {"float": "nan"}, [[[[[]]]]]]


def _paths(value: Any, prefix=()) -> list[tuple]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, prefix + (i,))
    return out


def _edit(doc: Any, rng: random.Random) -> Any:
    paths = _paths(doc)
    for _ in range(rng.randint(1, 3)):
        path = rng.choice(paths[1:]) if len(paths) > 1 else ()
        parent = doc
        for p in path[:-1]:
            parent = parent[p]
        if not path:
            break
        key = path[-1]
        try:
            action = rng.random()
            if action < 0.25 and isinstance(parent, dict):
                del parent[key]
            elif action < 0.35 and isinstance(parent, list):
                parent.insert(key, parent[key])
            elif action < 0.45 and isinstance(parent, list):
                del parent[key]
            elif action < 0.55:
                other = rng.choice(paths)
                value = doc
                for p in other:
                    value = value[p]
                parent[key] = json.loads(json.dumps(value))
            else:
                parent[key] = json.loads(json.dumps(rng.choice(_VALUES)))
        except (KeyError, IndexError, TypeError):
            pass
        paths = _paths(doc)
    return doc


def _repack(parts: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in parts.items():
            zf.writestr(zipfile.ZipInfo(name), data)
    return buf.getvalue()


def mutate(archive: bytes, rng: random.Random) -> bytes:
    kind = rng.random()
    if kind < 0.25:   # raw bytes: flips, truncation, splices
        data = bytearray(archive)
        for _ in range(rng.randint(1, 8)):
            choice = rng.random()
            if choice < 0.6 and data:
                data[rng.randrange(len(data))] = rng.randrange(256)
            elif choice < 0.8:
                del data[rng.randrange(len(data) + 1):]
            else:
                at = rng.randrange(len(data) + 1)
                data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        return bytes(data)
    with zipfile.ZipFile(io.BytesIO(archive)) as zf:
        parts = {i.filename: zf.read(i) for i in zf.infolist()}
    if kind < 0.85 or "weights.safetensors" not in parts:
        parts["graphport.json"] = json.dumps(_edit(json.loads(parts["graphport.json"]), rng)).encode()
    else:
        weights = parts["weights.safetensors"]
        (n,) = struct.unpack("<Q", weights[:8])
        header = _edit(json.loads(weights[8:8 + n]), rng)
        text = json.dumps(header).encode()
        if rng.random() < 0.2:
            n_field = struct.pack("<Q", rng.choice([0, 1, len(text) + 9, 2**63]))
        else:
            n_field = struct.pack("<Q", len(text))
        parts["weights.safetensors"] = n_field + text + weights[8 + n:]
    return _repack(parts)


def try_archive(data: bytes, example: tuple[tuple, dict], from_path: bool) -> str:
    """One of OUTCOMES: 'refused' (ArtifactError at load), 'ran' (it loaded, printed and
    ran), 'refused_inputs' (it loaded and printed, and refused the inputs when called)."""
    try:
        if from_path:
            fd, path = tempfile.mkstemp(suffix=".gport")
            try:
                with os.fdopen(fd, "wb") as out:
                    out.write(data)
                ep = gp.load(path)
            finally:
                os.unlink(path)
        else:
            ep = gp.load(io.BytesIO(data))
    except gp.ArtifactError:
        return "refused"
    str(ep)
    args, kwargs = _torch.pytree.tree_map_only(torch.Tensor, lambda t: t.clone(), example)
    try:
        ep.module()(*args, **kwargs)
    except CALL_REFUSALS:
        return "refused_inputs"
    return "ran"
