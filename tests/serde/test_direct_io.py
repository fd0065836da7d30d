"""Weights written past the page cache give the same archive, byte for byte, as through it:
whole blocks direct, the last partial block and everything else through the file, and a
plain write where the system refuses direct writes."""
from __future__ import annotations

import pytest
import torch

import graphport as gp
from graphport.serde import direct_io

from .helpers import saved


class Wide(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(64, 61)      # sizes that leave a partial last block
        self.b = torch.nn.Parameter(torch.randn(3, 5).to(torch.float16))

    def forward(self, x):
        return self.a(x).sum() + self.b.float().sum()


@pytest.fixture(scope="module")
def program():
    return gp.export(Wide(), (torch.randn(2, 64),))


def _spy_direct(monkeypatch) -> list:
    opened = []
    real = direct_io._open_direct

    def spy(path):
        fd = real(path)
        opened.append(fd is not None)
        return fd
    monkeypatch.setattr(direct_io, "_open_direct", spy)
    return opened


@pytest.mark.parametrize("stage", [direct_io.BLOCK, 3 * direct_io.BLOCK, 16 << 20])
def test_direct_writes_give_the_same_bytes(program, tmp_path, monkeypatch, stage):
    monkeypatch.setattr(direct_io, "_STAGE", stage)
    opened = _spy_direct(monkeypatch)
    path = tmp_path / "p.gport"
    gp.save(program, path)
    assert opened == [opened[0]] and path.read_bytes() == saved(program)
    if not opened[0]:
        pytest.skip("this file system refuses direct writes: the plain path was checked")
    loaded = gp.load(path)
    x = torch.randn(2, 64)
    assert torch.equal(loaded.module()(x), program.module()(x))


def test_without_direct_writes_the_bytes_are_the_same(program, tmp_path, monkeypatch):
    monkeypatch.setattr(direct_io, "_open_direct", lambda path: None)
    path = tmp_path / "p.gport"
    gp.save(program, path)
    assert path.read_bytes() == saved(program)


def test_a_file_system_refusing_the_direct_write_itself_gets_the_same_bytes(program, tmp_path, monkeypatch):
    """Some file systems accept O_DIRECT at open and refuse the first write (EINVAL)."""
    import errno
    import os
    reference = saved(program)
    real_pwrite = os.pwrite
    refused = []

    def refusing(fd, data, offset):
        if not refused:
            refused.append(offset)
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_pwrite(fd, data, offset)
    monkeypatch.setattr(direct_io.os, "pwrite", refusing)
    monkeypatch.setattr(direct_io, "_STAGE", direct_io.BLOCK)
    path = tmp_path / "p.gport"
    gp.save(program, path)
    if not refused:
        pytest.skip("no direct write attempted on this file system")
    assert path.read_bytes() == reference
