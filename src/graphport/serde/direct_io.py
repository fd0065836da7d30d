"""Writing a large member's bytes past the page cache (O_DIRECT), where the system allows it.

A save that goes through the page cache copies every byte of the weights into it, and the
kernel then writes them out at its own pace, throttling the writer when the cache fills:
on a busy machine a gigabyte took from 1 to 10 seconds to write and sync. Direct writes
go from an aligned staging buffer to the disk in large blocks, at the disk's speed, and
leave nothing to sync. The archive's bytes are the same either way: the member's data
starts at a multiple of BLOCK in the file (the archive aligns it), whole blocks go direct,
and the last partial block goes through the ordinary file.

Where direct writes are not available (another OS, tmpfs, a file system that refuses
them), the region is written through the ordinary file, as everything else.
"""
from __future__ import annotations

import contextlib
import errno
import mmap
import os
from typing import IO, Iterator

BLOCK = 4096            # offsets, lengths and buffer addresses of direct writes are multiples of it
_STAGE = 16 << 20       # bytes gathered before each direct write


class DirectRegionFile:
    """A binary file object over `out` (an open regular file at `path`) whose `direct()`
    regions are written with O_DIRECT. zipfile writes through it (write, tell, seek, flush)."""

    def __init__(self, out: IO[bytes], path: str):
        self._out = out
        self._path = path
        self._region: _Region | None = None

    def write(self, data) -> int:
        if self._region is not None:
            return self._region.write(data)
        return self._out.write(data)

    def tell(self) -> int:
        return self._region.position if self._region is not None else self._out.tell()

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        if self._region is not None:
            raise OSError("no seeking inside a direct region")
        return self._out.seek(offset, whence)

    def flush(self) -> None:
        self._out.flush()

    @contextlib.contextmanager
    def direct(self) -> Iterator[None]:
        """Bytes written inside go direct (whole blocks) where the system allows it."""
        start = self._out.tell()
        fd = _open_direct(self._path) if start % BLOCK == 0 else None
        if fd is None:
            yield
            return
        self._out.flush()
        self._region = region = _Region(fd, start, self._path)
        try:
            yield
            tail = region.finish()
        finally:
            self._region = None
            os.close(fd)
        self._out.seek(region.position - len(tail))
        self._out.write(tail)


def _open_direct(path: str) -> int | None:
    flag = getattr(os, "O_DIRECT", None)
    if flag is None:
        return None
    try:
        return os.open(path, os.O_WRONLY | flag)
    except OSError:
        return None


class _Region:
    def __init__(self, fd: int, start: int, path: str):
        self.fd = fd
        self._path = path
        self.position = start
        self._flushed = start                       # file offset up to which blocks are written
        self._stage = mmap.mmap(-1, _STAGE)         # page-aligned, as direct writes need
        self._filled = 0
        self._plain = False

    def _use_plain_descriptor(self) -> None:
        plain = os.open(self._path, os.O_WRONLY)
        os.dup2(plain, self.fd)
        os.close(plain)
        self._plain = True

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        taken = 0
        while taken < len(view):
            n = min(len(view) - taken, _STAGE - self._filled)
            self._stage[self._filled:self._filled + n] = view[taken:taken + n]
            self._filled += n
            taken += n
            if self._filled == _STAGE:
                self._write_blocks(_STAGE)
        self.position += len(view)
        return len(view)

    def _write_blocks(self, length: int) -> None:
        """Write the first `length` bytes of the stage (a multiple of BLOCK) direct."""
        view = memoryview(self._stage)[:length]
        done = 0
        while done < length:
            try:
                done += os.pwrite(self.fd, view[done:], self._flushed + done)
            except OSError as e:
                # Some file systems accept O_DIRECT at open and refuse the write itself:
                # the rest of the region goes through an ordinary descriptor.
                if e.errno != errno.EINVAL or self._plain:
                    raise
                self._use_plain_descriptor()
        view.release()
        self._flushed += length
        rest = self._filled - length
        if rest:
            self._stage[:rest] = self._stage[length:self._filled]
        self._filled = rest

    def finish(self) -> bytes:
        """Write the whole blocks left; return the last partial block's bytes, for the
        ordinary file."""
        whole = self._filled - self._filled % BLOCK
        if whole:
            self._write_blocks(whole)
        tail = bytes(self._stage[:self._filled])
        self._stage.close()
        return tail
