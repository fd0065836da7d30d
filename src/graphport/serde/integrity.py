"""Checksums of the stored weights: written at save, checked at load.

Loading from a path memory-maps weights.safetensors, so the zip reader's CRC of the member
(checked when a member is read whole) never sees the weights' bytes: a byte flipped on disk
would reach a computation. So save writes one CRC-32 per stored tensor into graphport.json
(`weight_checksums`), and load checks every stored tensor against it before the program is
built, whether the weights are mapped or read; an archive written before checksums existed
(format 1.0 and 1.1) has its whole weights member checked against the zip directory's
CRC-32 instead. `load(..., check_weights=False)` skips the check of mapped weights, for a
lazy load of weights larger than one wants to read up front.

CRC-32 (zlib's) because it detects damage (every burst of up to 32 flipped bits, any other
change but for one chance in 2**32) at several GB/s on one core, and releases the GIL, so the
tensors are checked on several threads. It is computed with ISA-L's implementation (the
`isal` package), the same CRC-32 as zlib's, 3-4x faster (carry-less multiplication
instructions), so a fresh process's load of a large program spends little on it; a cryptographic hash would be 4-5x slower and buys
nothing here: whoever can rewrite the weights can rewrite their checksums too (this is a
check against damage, not a signature).
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, TypeVar

import torch
from isal.isal_zlib import crc32 as _crc32   # zlib's CRC-32, computed faster

from ..errors import ArtifactError, short as _short

ALGORITHM = "crc32"
_MAX_THREADS = 8
_T = TypeVar("_T")
_R = TypeVar("_R")


def crc32_of(data: torch.Tensor) -> int:
    """The CRC-32 of a CPU uint8 tensor's bytes (contiguous), read without a copy."""
    return _crc32(data.numpy()) if data.numel() else 0


def checksums(stored_bytes: dict[str, Callable[[], torch.Tensor]]) -> dict:
    """graphport.json's `weight_checksums`: {"algorithm", "tensors": {key: crc}} for the
    tensors about to be written (`stored_bytes`: key -> the bytes written for it)."""
    keys = sorted(stored_bytes)
    values = _parallel(lambda k: crc32_of(stored_bytes[k]()), keys)
    return {"algorithm": ALGORITHM, "tensors": dict(zip(keys, values))}


def check_tensors(stored_bytes: dict[str, torch.Tensor], recorded: dict) -> None:
    """Every stored tensor's bytes against the checksum graphport.json records for it (the
    schema has checked `recorded`'s form); the first mismatch is an ArtifactError."""
    if recorded.get("algorithm") != ALGORITHM:
        raise ArtifactError(f"graphport.json's weight checksums use {_short(recorded.get('algorithm'))}; this "
                            f"graphport checks {ALGORITHM}")
    expected = recorded["tensors"]
    if set(expected) != set(stored_bytes):
        missing, extra = sorted(set(stored_bytes) - set(expected)), sorted(set(expected) - set(stored_bytes))
        raise ArtifactError("graphport.json's weight checksums do not list the tensors weights.safetensors holds"
                            + (f" (no checksum for {_short(missing)})" if missing else "")
                            + (f" (checksums for absent tensors {_short(extra)})" if extra else ""))
    keys = sorted(stored_bytes, key=lambda k: -stored_bytes[k].numel())   # the largest first, for the threads
    found = _parallel(lambda k: crc32_of(stored_bytes[k]), keys)
    for key, crc in zip(keys, found):
        if crc != expected[key]:
            raise ArtifactError(f"weights.safetensors is damaged: the bytes of tensor {_short(key)} do not match "
                                "their checksum (the file changed after it was saved)",
                                fix="save the program again from its source, or restore the file from a good copy")


def check_member(data: torch.Tensor, crc: int, name: str) -> None:
    """A whole member's bytes against the zip directory's CRC-32 (archives without per-tensor
    checksums)."""
    if crc32_of(data) != crc:
        raise ArtifactError(f"member {name!r} is corrupt (its checksum does not match)",
                            fix="save the program again from its source, or restore the file from a good copy")


def _parallel(fn: Callable[[_T], _R], items: Iterable[_T]) -> list[_R]:
    items = list(items)
    workers = min(len(items), os.cpu_count() or 1, _MAX_THREADS)
    if workers <= 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="graphport-crc") as pool:
        return list(pool.map(fn, items))
