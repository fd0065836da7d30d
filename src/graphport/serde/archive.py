"""The zip container: deterministic, aligned writing and defensive reading.

Writing: members in a fixed order, stored uncompressed, with fixed timestamps and
permissions, so the same program always gives the same bytes; a member can be aligned
(its data starts at a multiple of 4096 bytes in the file, padded with an extra field) so
tensors inside it can be memory-mapped, and written past the page cache (direct_io.py).

Reading treats the file as hostile: only stored (uncompressed) members, so there is
nothing to inflate (no zip bombs); declared sizes and offsets are checked against the
file's real length before anything is read; member names are a fixed set (no `..`, no
absolute paths, no duplicates); the JSON member has a size and nesting limit and is
parsed without NaN, Infinity or duplicate keys. Every failure is an ArtifactError.
"""
from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import re
import struct
import zipfile
from dataclasses import dataclass
from typing import IO, Any, Iterable

from isal.isal_zlib import crc32   # zlib's CRC-32, computed faster (integrity.py)

from ..errors import ArtifactError, InternalError
from .direct_io import BLOCK

ALIGN = 64
MEMBER_ALIGN = BLOCK           # an aligned member's data starts at a multiple of it (direct writes)
_EPOCH = (1980, 1, 1, 0, 0, 0)
_PAD_FIELD = 0x6770            # extra-field id of the alignment padding (ignored by readers)
_LOCAL_HEADER = struct.Struct("<4s5H3L2H")
_CHUNK = 1 << 24


@dataclass(frozen=True)
class Limits:
    """What a reader accepts. The defaults fit any real program with room to spare."""
    max_members: int = 1024
    max_json_bytes: int = 512 << 20
    max_json_depth: int = 256
    max_extra_file_bytes: int = 256 << 20
    max_unseekable_bytes: int = 64 << 30


DEFAULT_LIMITS = Limits()


class ArchiveWriter:
    def __init__(self, fileobj: IO[bytes]):
        self._zip = zipfile.ZipFile(fileobj, "w", compression=zipfile.ZIP_STORED, allowZip64=True)

    def add(self, name: str, chunks: Iterable[bytes | memoryview], size: int, align: bool = False) -> None:
        """Write member `name` of exactly `size` bytes from `chunks`."""
        info = zipfile.ZipInfo(name, date_time=_EPOCH)
        info.compress_type = zipfile.ZIP_STORED
        info.create_system = 3
        info.external_attr = 0o644 << 16
        info.file_size = size
        zip64 = size * 1.05 > zipfile.ZIP64_LIMIT
        if align:
            start = self._zip.start_dir + _LOCAL_HEADER.size + len(name.encode()) + (20 if zip64 else 0)
            pad = -start % MEMBER_ALIGN
            if pad:
                pad += MEMBER_ALIGN if pad < 4 else 0
                info.extra = struct.pack("<HH", _PAD_FIELD, pad - 4) + bytes(pad - 4)
        written = 0
        direct = getattr(self._zip.fp, "direct", None) if align else None
        with self._zip.open(info, "w", force_zip64=zip64) as out, \
                direct() if direct is not None else contextlib.nullcontext():
            for chunk in chunks:
                out.write(chunk)
                written += len(chunk)
        if written != size:
            raise InternalError(f"archive member {name} declared {size} bytes but {written} were written")

    def close(self) -> None:
        self._zip.close()


@dataclass(frozen=True)
class Member:
    name: str
    offset: int     # where its data starts in the file
    size: int
    crc: int


_EXTRA_NAME = re.compile(r"extra/[A-Za-z0-9_][A-Za-z0-9_.\-]{0,199}\Z")


def _check_name(name: str) -> None:
    parts = name.split("/")
    if name.startswith("/") or "\\" in name or ":" in name or ".." in parts or "" in parts or "\0" in name:
        raise ArtifactError(f"the archive has a member named {name!r}: absolute paths, '..' and drive names are "
                            "refused")
    if name not in ("graphport.json", "weights.safetensors") and not _EXTRA_NAME.match(name):
        raise ArtifactError(f"the archive has an unexpected member {name!r}",
                            fix="a graphport archive holds graphport.json, weights.safetensors and extra/<name> only")


class ArchiveReader:
    """The members of an archive, checked; their bytes are read on request."""

    def __init__(self, f: str | os.PathLike | IO[bytes], limits: Limits = DEFAULT_LIMITS):
        self.limits = limits
        self.path: str | None = None
        if isinstance(f, (str, os.PathLike)):
            self.path = os.fspath(f)
            try:
                self._file: IO[bytes] = open(self.path, "rb")
            except OSError as e:
                raise ArtifactError(f"cannot open {self.path}: {e.strerror}") from None
            self._owned = True
        else:
            self._file, self._owned = _seekable(f, limits), False
        try:
            self._file.seek(0, io.SEEK_END)
            self.length = self._file.tell()
            self.members = self._index()
        except BaseException:
            self.close()
            raise

    def _index(self) -> dict[str, Member]:
        try:
            with zipfile.ZipFile(self._file) as zf:
                infos = zf.infolist()
        except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError, EOFError, struct.error,
                NotImplementedError, OverflowError, UnicodeDecodeError, KeyError, IndexError) as e:
            raise ArtifactError(f"not a valid graphport archive (zip): {e}") from None
        if len(infos) > self.limits.max_members:
            raise ArtifactError(f"the archive has {len(infos)} members, more than the {self.limits.max_members} "
                                "accepted")
        members: dict[str, Member] = {}
        for info in infos:
            _check_name(info.filename)
            if info.filename in members:
                raise ArtifactError(f"the archive has the member {info.filename!r} twice")
            members[info.filename] = self._member(info)
        if "graphport.json" not in members:
            raise ArtifactError("the archive has no graphport.json: it is not a graphport program")
        return members

    def _member(self, info: zipfile.ZipInfo) -> Member:
        name = info.filename
        if info.compress_type != zipfile.ZIP_STORED:
            raise ArtifactError(f"member {name!r} is compressed; graphport archives store members uncompressed")
        if info.flag_bits & 0x1:
            raise ArtifactError(f"member {name!r} is encrypted")
        if info.file_size != info.compress_size:
            raise ArtifactError(f"member {name!r} declares {info.file_size} bytes but stores {info.compress_size}")
        if not 0 <= info.header_offset <= self.length - _LOCAL_HEADER.size:
            raise ArtifactError(f"member {name!r} starts outside the file")
        self._file.seek(info.header_offset)
        header = _LOCAL_HEADER.unpack(self._file.read(_LOCAL_HEADER.size))
        if header[0] != b"PK\x03\x04":
            raise ArtifactError(f"member {name!r}: no local header where the directory says it starts")
        name_len, extra_len = header[9], header[10]
        if self._file.read(name_len) != info.filename.encode("utf-8" if info.flag_bits & 0x800 else "cp437"):
            raise ArtifactError(f"member {name!r}: its local header names another file")
        offset = info.header_offset + _LOCAL_HEADER.size + name_len + extra_len
        if offset + info.file_size > self.length:
            raise ArtifactError(f"member {name!r} declares {info.file_size} bytes, past the end of the file "
                                f"({self.length} bytes): the archive is truncated or lies about its sizes")
        return Member(name, offset, info.file_size, info.CRC)

    def read(self, name: str, limit: int) -> bytes:
        """The member's bytes, checked against its CRC; refuses members over `limit` bytes."""
        member = self.members.get(name)
        if member is None:
            raise ArtifactError(f"the archive has no member {name!r}")
        if member.size > limit:
            raise ArtifactError(f"member {name!r} is {member.size} bytes, more than the {limit} accepted")
        self._file.seek(member.offset)
        data = self._file.read(member.size)
        if len(data) != member.size or crc32(data) != member.crc:
            raise ArtifactError(f"member {name!r} is corrupt (its checksum does not match)")
        return data

    def read_at(self, offset: int, size: int) -> bytes:
        """`size` bytes at `offset` of the file (inside a member the index checked)."""
        self._file.seek(offset)
        data = self._file.read(size)
        if len(data) != size:
            raise ArtifactError(f"the archive is truncated: {size} bytes at offset {offset} are missing")
        return data

    def read_json(self, name: str) -> Any:
        return parse_json(self.read(name, self.limits.max_json_bytes), name, self.limits.max_json_depth)

    def close(self) -> None:
        if self._owned:
            self._file.close()


def _seekable(f: IO[bytes], limits: Limits) -> IO[bytes]:
    if not hasattr(f, "read"):
        raise ArtifactError(f"load expects a path or a binary file object, got a {type(f).__qualname__}")
    try:
        if f.seekable():
            return f
    except (AttributeError, OSError, ValueError):
        pass
    data = f.read(limits.max_unseekable_bytes + 1)
    if not isinstance(data, bytes):
        raise ArtifactError("load expects a binary file object (opened with 'rb')")
    if len(data) > limits.max_unseekable_bytes:
        raise ArtifactError(f"the stream is longer than {limits.max_unseekable_bytes} bytes")
    return io.BytesIO(data)


# Every byte but the structural ones and quotes: deleted before the depth count.
_NOT_STRUCTURE = bytes(c for c in range(256) if c not in b'"[]{}')
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


def json_depth(data: bytes) -> int:
    """The deepest nesting of arrays and objects (strings skipped), without recursion.

    Escapes go first, in JSON's own left-to-right pairing (escaped backslashes, then
    escaped quotes, then the backslash of every other escape), so that every quote left
    opens or closes a string; what lies between the odd and the even quotes is outside
    strings. Only C-speed bytes operations run over the whole document."""
    text = data.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _NOT_STRUCTURE)
    outside = b"".join(text.split(b'"')[::2])
    return max(itertools.accumulate((_STEP[c] for c in outside), initial=0))


def _refuse_constant(name: str):
    raise ArtifactError(f"the JSON holds {name}, which graphport never writes")


def _unique_keys(pairs: list) -> dict:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen = set()
        duplicate = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise ArtifactError(f"a JSON object has the key {duplicate!r} twice")
    return out


def parse_json(data: bytes, name: str, max_depth: int) -> Any:
    depth = json_depth(data)
    if depth > max_depth:
        raise ArtifactError(f"{name} nests {depth} levels deep, more than the {max_depth} accepted")
    try:
        return json.loads(data.decode("utf-8"), parse_constant=_refuse_constant, object_pairs_hook=_unique_keys)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise ArtifactError(f"{name} is not valid JSON: {e}") from None


def dump_json(doc: Any) -> bytes:
    """Canonical bytes: one layout for one document (key order is the writer's, fixed)."""
    return json.dumps(doc, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")
