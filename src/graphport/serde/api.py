"""graphport.save and graphport.load.

save writes the archive to a temporary file in the target's folder, flushes and syncs
it, then renames it over the target: a reader (or a crash) sees the old file or the new
one, never a partial one. load reads nothing but data: it checks the archive, validates
graphport.json against the format's JSON Schema, rebuilds the program from fixed tables
and registered operators, recomputes every node's shapes and dtypes from its inputs' to
check the graph against its own metadata (check.py: torch's meta kernels, or meta_rules.py
for common operators on static sizes), runs the IR verifier, and checks the stored
weights' bytes against their checksums (integrity.py).
"""
from __future__ import annotations

import logging
import os
import tempfile
import time
from typing import IO, Any

import torch
from safetensors.torch import load_file

from .. import progress
from ..errors import ArtifactError, GraphportError
from ..program import ExportedProgram
from ..signature import InputKind
from .archive import ArchiveReader, ArchiveWriter, dump_json
from .direct_io import DirectRegionFile
from .integrity import check_member, check_tensors, checksums
from .program_json import check_version, program_from_json, program_to_json
from .schema import validate_document
from .state import TensorBinder, TensorTable
from .weights import MEMBER as WEIGHTS, StoredWeights, decode_safetensors, encode_safetensors, stored_bytes

log = logging.getLogger("graphport.serde")
_LOAD_STEPS = 5   # document, schema, program, graph checks, weights: the steps progress counts

PathOrFile = str | os.PathLike | IO[bytes]


def save(ep: ExportedProgram, f: PathOrFile, *, extra_files: dict[str, str | bytes] | None = None) -> None:
    """Write `ep` to `f` (a path or a binary file object) as a graphport archive.

    `extra_files` (name -> text or bytes) are stored beside the program, as torch.export.save's."""
    if not isinstance(ep, ExportedProgram):
        raise ArtifactError(f"save expects a graphport ExportedProgram, got a {type(ep).__qualname__}",
                            fix="pass the program graphport.export returned")
    _refuse_custom_objects(ep)
    extras = _extra_bytes(extra_files or {})
    start = time.perf_counter()
    table = TensorTable()
    content = program_to_json(ep, table, sorted(extras))
    if table.data:
        content["weight_checksums"] = checksums(
            {key: (lambda t=tensor: stored_bytes(t)) for key, tensor in table.data.items()})
    doc = dump_json(content)
    if isinstance(f, (str, os.PathLike)):
        _atomic_write(os.fspath(f), lambda out: _write(out, doc, table, extras))
    else:
        _write(f, doc, table, extras)
    if log.isEnabledFor(logging.INFO):
        log.info("saved %d nodes, %d tensors (%d bytes) in %.3f s", len(ep.graph.nodes), len(table.data),
                 sum(t.numel() * t.element_size() for t in table.data.values()), time.perf_counter() - start)


def _refuse_custom_objects(ep: ExportedProgram) -> None:
    """A custom object (a TorchBind instance) is C++ state: torch.export.save pickles it, and
    loading it runs that pickle. graphport's archives load without running code, so they do
    not store one."""
    objects = [s for s in ep.graph_signature.input_specs if s.kind is InputKind.CUSTOM_OBJ]
    if objects:
        listed = ", ".join(f"'{s.target}' ({s.arg.class_fqn.removeprefix('__torch__.torch.classes.')})"
                           for s in objects)
        raise ArtifactError(
            f"the program holds the custom object{'s' if len(objects) > 1 else ''} {listed}; a graphport archive "
            "stores no objects, since restoring one means running its class's code (torch.export.save pickles it)",
            fix="keep the program in memory, or save it with torch: `torch.export.save(graphport.interop.to_torch(ep), "
                "path)` (it pickles the object: load such a file only from a source you trust), or keep the object's "
                "state as tensors on the module instead of in a torch.classes object")


def _extra_bytes(extra_files: dict) -> dict[str, bytes]:
    out = {}
    for name, content in extra_files.items():
        if not isinstance(name, str) or not name or "/" in name or "\\" in name or name in (".", "..") \
                or not all(c.isalnum() or c in "_.-" for c in name) or not name.isascii() or len(name) > 200:
            raise ArtifactError(f"extra file name {name!r} is not a plain file name",
                                fix="use letters, digits, '_', '.' and '-' only")
        out[name] = content.encode("utf-8") if isinstance(content, str) else bytes(content)
    return out


def _write(out: IO[bytes], doc: bytes, table: TensorTable, extras: dict[str, bytes]) -> None:
    writer = ArchiveWriter(out)
    writer.add("graphport.json", [doc], len(doc))
    if table.data:
        size, chunks = encode_safetensors(table.data)
        writer.add(WEIGHTS, chunks, size, align=True)
    for name in sorted(extras):
        writer.add(f"extra/{name}", [extras[name]], len(extras[name]))
    writer.close()


def _atomic_write(path: str, write) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder)
    try:
        os.chmod(tmp, _file_mode(path))
        with os.fdopen(fd, "wb") as out:
            write(DirectRegionFile(out, tmp))
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    try:   # make the rename itself durable
        dir_fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _file_mode(path: str) -> int:
    """The mode the target keeps (if it exists) or a new file gets (mkstemp's is private)."""
    try:
        return os.stat(path).st_mode & 0o777
    except FileNotFoundError:
        mask = os.umask(0)
        os.umask(mask)
        return 0o666 & ~mask


def load(f: PathOrFile, *, extra_files: dict[str, Any] | None = None,
         weights: dict[str, torch.Tensor] | str | os.PathLike | None = None,
         check_weights: bool = True) -> ExportedProgram:
    """Read a program saved by `save`. No code from the file runs.

    `extra_files`: its keys are filled in with the saved extra files' text (as torch.export.load).
    `weights`: a state dict or a safetensors path binding the weights of a program saved as
    structure only (exported on the meta device); they may also replace stored ones.
    `check_weights`: check every stored tensor's bytes against the checksum written at save
    before returning (reads all the weights once). False keeps a load from a path lazy (weights
    are read from the memory map as they are used) and leaves the mapped weights unchecked:
    for multi-gigabyte programs whose file is trusted (docs/format.md, Integrity)."""
    bound = _weights(weights)
    reader = ArchiveReader(f)
    try:
        return _load(reader, extra_files, bound, check_weights)
    except ArtifactError:
        raise
    except GraphportError as e:   # the program the archive describes does not hold together
        raise ArtifactError(f"malformed graphport archive: {e.what}") from e
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, RecursionError, OverflowError,
            RuntimeError, NotImplementedError, AssertionError, ZeroDivisionError, MemoryError, SyntaxError) as e:
        raise ArtifactError(f"malformed graphport archive: {type(e).__name__}: {e}") from e
    finally:
        reader.close()


def _load(reader: ArchiveReader, extra_files: dict | None, weights: dict | None,
          check_weights: bool) -> ExportedProgram:
    start = time.perf_counter()
    doc = reader.read_json("graphport.json")
    progress.report("load", 1, _LOAD_STEPS)
    check_version(doc)   # an unknown major version is named as such, before its form is judged
    validate_document(doc)
    progress.report("load", 2, _LOAD_STEPS)
    stored = decode_safetensors(reader) if WEIGHTS in reader.members else None
    ep = program_from_json(doc, TensorBinder(stored.tensors if stored is not None else {}), weights)
    progress.report("load", 3, _LOAD_STEPS)
    declared = doc.get("extra_files")
    if not isinstance(declared, list) or sorted(f"extra/{n}" for n in declared if isinstance(n, str)) != \
            sorted(m for m in reader.members if m.startswith("extra/")):
        raise ArtifactError("graphport.json's list of extra files does not match the archive's members")
    if extra_files is not None:
        for name in list(extra_files):
            member = f"extra/{name}"
            if member in reader.members:
                extra_files[name] = reader.read(member, reader.limits.max_extra_file_bytes).decode("utf-8", "replace")
    progress.report("load", 4, _LOAD_STEPS)
    if stored is not None and check_weights:   # last: the cheap checks refuse a broken file first
        _check_weights(stored, doc, reader)
    progress.report("load", 5, _LOAD_STEPS)
    if log.isEnabledFor(logging.INFO):
        log.info("loaded %d nodes, %d stored tensors (%s) in %.3f s", len(ep.graph.nodes),
                 len(stored.tensors) if stored is not None else 0,
                 "checked" if stored is not None and check_weights else "not checked", time.perf_counter() - start)
    return ep


def _check_weights(stored: StoredWeights, doc: dict, reader: ArchiveReader) -> None:
    """Per-tensor checksums where the archive has them (format 1.2 on); an older archive's
    mapped weights member against the zip directory's CRC (read whole, it was checked as read)."""
    if "weight_checksums" in doc:
        check_tensors(stored.raw, doc["weight_checksums"])
    elif stored.mapped:
        check_member(stored.member, reader.members[WEIGHTS].crc, WEIGHTS)


def _weights(weights) -> dict[str, torch.Tensor] | None:
    if weights is None or isinstance(weights, dict):
        return weights
    if isinstance(weights, (str, os.PathLike)):
        try:
            return load_file(os.fspath(weights))
        except (OSError, ValueError, RuntimeError) as e:
            raise ArtifactError(f"cannot read the weights file {os.fspath(weights)}: {e}") from None
    raise ArtifactError(f"weights must be a state dict or a safetensors path, got a {type(weights).__qualname__}")
