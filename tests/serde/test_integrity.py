"""A weight changed on disk never reaches a computation unnoticed: every stored tensor is
checked against the checksum written at save, whether the weights are memory-mapped (load
from a path) or read (load from a file object); archives written before checksums existed
are checked against the zip directory's CRC of the weights member."""
from __future__ import annotations

import io
import json
import shutil
import struct
import zipfile
import zlib
from pathlib import Path

import pytest
import torch

import graphport as gp
from graphport.serde.integrity import crc32_of
from .helpers import saved
from .test_hostile import members, refused, with_doc

GOLDEN = Path(__file__).parent / "golden"


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        self.register_buffer("scale", torch.full((3,), 2.0))

    def forward(self, x):
        return self.lin(x) * self.scale


@pytest.fixture(scope="module")
def program() -> gp.ExportedProgram:
    torch.manual_seed(0)
    return gp.export(Net(), (torch.randn(2, 4),))


def tensor_offset(data: bytes, key: str) -> int:
    """Where tensor `key`'s first byte lies in the archive file."""
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        info = zf.getinfo("weights.safetensors")
    name_len, extra_len = struct.unpack("<HH", data[info.header_offset + 26:info.header_offset + 30])
    member = info.header_offset + 30 + name_len + extra_len
    (length,) = struct.unpack("<Q", data[member:member + 8])
    header = json.loads(data[member + 8:member + 8 + length])
    return member + 8 + length + header[key]["data_offsets"][0]


def flipped(data: bytes, key: str) -> bytes:
    at = tensor_offset(data, key) + 1
    return data[:at] + bytes([data[at] ^ 0x40]) + data[at + 1:]


def test_a_flipped_weight_byte_is_refused_from_a_path_and_a_file_object(program, tmp_path):
    damaged = flipped(saved(program), "lin.weight")
    path = tmp_path / "damaged.gport"
    path.write_bytes(damaged)
    err = refused(path, "lin.weight", "checksum")
    assert "save the program again" in err.fix
    refused(io.BytesIO(damaged), "checksum")


def test_every_stored_tensor_is_covered(program, tmp_path):
    data = saved(program)
    keys = json.loads(members(data)["graphport.json"])["weight_checksums"]["tensors"]
    assert set(keys) == {"lin.weight", "lin.bias", "scale", "example_inputs/0"}
    for key in keys:
        path = tmp_path / "damaged.gport"
        path.write_bytes(flipped(data, key))
        refused(path, key)


def test_an_intact_archive_loads_and_computes_as_saved(program, tmp_path):
    path = tmp_path / "ok.gport"
    gp.save(program, path)
    x = torch.randn(2, 4)
    assert torch.equal(gp.load(path).module()(x), program.module()(x))


def test_opting_out_keeps_a_path_load_lazy_and_unchecked(program, tmp_path):
    """The documented opt-out: mapped weights are not read at load, so not checked either."""
    path = tmp_path / "damaged.gport"
    path.write_bytes(flipped(saved(program), "lin.weight"))
    loaded = gp.load(path, check_weights=False)
    assert not torch.equal(loaded.state_dict["lin.weight"], program.state_dict["lin.weight"])
    refused(io.BytesIO(path.read_bytes()), "checksum")   # a file object's member is read, so checked, anyway


def test_checksums_must_list_exactly_the_stored_tensors(program):
    data = saved(program)
    refused(with_doc(data, lambda d: d["weight_checksums"]["tensors"].pop("scale")), "scale")
    refused(with_doc(data, lambda d: d["weight_checksums"]["tensors"].update(ghost=1)), "ghost")
    refused(with_doc(data, lambda d: d["weight_checksums"].update(algorithm="md5")), "weight_checksums")
    refused(with_doc(data, lambda d: d["weight_checksums"]["tensors"].update(scale=-1)), "weight_checksums")


def test_an_archive_without_checksums_is_checked_against_the_zip_crc(tmp_path):
    """Format 1.0 and 1.1 archives have no per-tensor checksums: their whole weights member
    is checked against the CRC-32 the zip directory records for it."""
    golden = GOLDEN / "v1_1_static.gport"
    path = tmp_path / "old.gport"
    shutil.copy(golden, path)
    gp.load(path)
    path.write_bytes(flipped(golden.read_bytes(), "lin.weight"))
    refused(path, "weights.safetensors", "checksum")


def test_the_checksum_is_zlibs_crc32():
    """Computed with ISA-L for speed, the checksum is the CRC-32 the format specifies (zlib's),
    so archives written by either implementation check the same."""
    generator = torch.Generator().manual_seed(0)
    for size in (0, 1, 7, 4096, 1 << 20):
        data = torch.randint(0, 256, (size,), dtype=torch.uint8, generator=generator)
        assert crc32_of(data) == zlib.crc32(data.numpy().tobytes())
