"""weights.safetensors: tensor data, written once per tensor, read by memory map.

The member is a standard safetensors file (any safetensors reader opens it). Tensors are
laid out by decreasing element size after a header padded to 64 bytes, and the archive
aligns the member itself, so each tensor's data sits at a multiple of its element size
in the archive file: loading from a path maps the file (copy-on-write) and makes each
tensor a view of the mapping, so nothing is read until it is used.

The header is checked before any tensor is made: known dtypes, non-negative shapes,
offsets inside the data and matching each tensor's byte size.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Iterator

import torch

from .. import progress
from ..errors import ArtifactError, short as _short
from .archive import ALIGN, ArchiveReader, dump_json, parse_json

MEMBER = "weights.safetensors"
DTYPES: dict[str, torch.dtype] = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "U16": torch.uint16, "U32": torch.uint32, "U64": torch.uint64, "BOOL": torch.bool,
    "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2, "F8_E4M3FNUZ": torch.float8_e4m3fnuz,
    "F8_E5M2FNUZ": torch.float8_e5m2fnuz, "C64": torch.complex64,
}
_CODES = {v: k for k, v in DTYPES.items()}
_MAX_HEADER = 256 << 20


def storable(dtype: torch.dtype) -> bool:
    return dtype in _CODES


def encode_safetensors(tensors: dict[str, torch.Tensor]) -> tuple[int, Iterator[bytes | memoryview]]:
    """(size, chunks) of a safetensors file holding `tensors` (contiguous CPU data)."""
    order = sorted(tensors, key=lambda k: (-tensors[k].element_size(), k))
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for key in order:
        t = tensors[key]
        if not storable(t.dtype):
            raise ArtifactError(f"cannot save tensor {key}: safetensors has no dtype {t.dtype}",
                                fix="convert it to a dtype safetensors stores (e.g. float32) before export")
        nbytes = t.numel() * t.element_size()
        header[key] = {"dtype": _CODES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = dump_json(header)
    text += b" " * (-(8 + len(text)) % ALIGN)

    def chunks() -> Iterator[bytes | memoryview]:
        yield struct.pack("<Q", len(text)) + text
        written = 0
        for key in order:
            if tensors[key].numel():
                data = stored_bytes(tensors[key])
                yield memoryview(data.numpy())
                written += data.numel()
                progress.report("save weights", written, offset)
    return 8 + len(text) + offset, chunks()


def stored_bytes(t: torch.Tensor) -> torch.Tensor:
    """The bytes safetensors stores for `t` (contiguous, on the CPU), as a flat uint8 tensor."""
    return t.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8)


@dataclass
class StoredWeights:
    """The decoded weights member. `tensors`: key -> tensor; `raw`: key -> the tensor's bytes
    as stored (a flat uint8 view, for the checksums); `member`: the whole member's bytes;
    `mapped`: whether they are views of a memory map of the archive file (else of one copy
    of the member, which the archive reader checked against the zip CRC as it read it)."""
    tensors: dict[str, torch.Tensor]
    raw: dict[str, torch.Tensor]
    member: torch.Tensor
    mapped: bool


def decode_safetensors(reader: ArchiveReader) -> StoredWeights:
    """Every tensor of the archive's weights member: views of a memory map when the
    archive was opened from a path, else of one checked copy of the member."""
    member = reader.members.get(MEMBER)
    if member is None:
        raise ArtifactError(f"the archive has no {MEMBER}, but the program needs stored tensors")
    if member.size < 8:
        raise ArtifactError(f"{MEMBER} is truncated ({member.size} bytes)")
    (length,) = struct.unpack("<Q", reader.read_at(member.offset, 8))
    if length > min(member.size - 8, _MAX_HEADER):
        raise ArtifactError(f"{MEMBER} declares a {length}-byte header in a {member.size}-byte member")
    header = parse_json(reader.read_at(member.offset + 8, length), f"{MEMBER} header", 8)
    if not isinstance(header, dict):
        raise ArtifactError(f"{MEMBER}: the header is not a JSON object")
    data_len = member.size - 8 - length
    entries = {k: _entry(k, v, data_len) for k, v in header.items() if k != "__metadata__"}
    if reader.path is not None:
        storage = torch.UntypedStorage.from_file(reader.path, shared=False, nbytes=reader.length)
        member_start = member.offset        # the mapping is the whole archive file
    else:
        copy = bytearray(reader.read(MEMBER, reader.length))
        storage = torch.frombuffer(copy, dtype=torch.uint8).untyped_storage()
        member_start = 0                    # the copy is the member
    origin = member_start + 8 + length
    out, raw = {}, {}
    for key, (dtype, shape, start, end) in entries.items():
        itemsize = torch.empty((), dtype=dtype).element_size()
        position = origin + start
        raw[key] = data = torch.empty(0, dtype=torch.uint8).set_(storage, position, (end - start,))
        if start == end:
            out[key] = torch.empty(shape, dtype=dtype)
        elif position % itemsize == 0:
            out[key] = torch.empty(0, dtype=dtype).set_(storage, position // itemsize, shape)
        else:   # not aligned for a view (another writer's file): a copy
            out[key] = data.clone().view(dtype).reshape(shape)
    whole = torch.empty(0, dtype=torch.uint8).set_(storage, member_start, (member.size,))
    return StoredWeights(out, raw, whole, reader.path is not None)


def _entry(key: str, entry: Any, data_len: int) -> tuple:
    if not isinstance(entry, dict) or entry.get("dtype") not in DTYPES:
        raise ArtifactError(f"{MEMBER}: tensor {_short(key)} has no known dtype ({_short(entry)})")
    shape, offsets = entry.get("shape"), entry.get("data_offsets")
    if not isinstance(shape, list) or not all(type(s) is int and s >= 0 for s in shape) or len(shape) > 64:
        raise ArtifactError(f"{MEMBER}: tensor {_short(key)} has a malformed shape {_short(shape)}")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(type(o) is int for o in offsets):
        raise ArtifactError(f"{MEMBER}: tensor {_short(key)} has malformed data offsets {_short(offsets)}")
    dtype = DTYPES[entry["dtype"]]
    numel = 1
    for s in shape:
        numel *= s
    start, end = offsets
    if not 0 <= start <= end <= data_len or end - start != numel * torch.empty((), dtype=dtype).element_size():
        raise ArtifactError(f"{MEMBER}: tensor {_short(key)} claims bytes [{start}, {end}) for shape {shape} "
                            f"{entry['dtype']}, which do not fit the data ({data_len} bytes)")
    return dtype, shape, start, end
