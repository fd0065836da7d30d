"""Malformed and hostile archives: every one is an ArtifactError that says what is wrong,
never another exception, a hang or unbounded memory; nothing in the file runs."""
from __future__ import annotations

import io
import json
import struct
import zipfile

import pytest
import torch

import graphport as gp
from graphport.serde.archive import ArchiveReader, Limits
from graphport.serde.program_json import VERSION
from .helpers import saved


class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.lin(x).relu() * x.shape[0]


@pytest.fixture(scope="module")
def archive() -> bytes:
    ep = gp.export(Small(), (torch.randn(5, 4),), dynamic_shapes={"x": {0: gp.Dim("n", max=32)}})
    return saved(ep)


def members(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        return {i.filename: zf.read(i) for i in zf.infolist()}


def build(entries: list[tuple[str, bytes]], compression=zipfile.ZIP_STORED) -> io.BytesIO:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=compression) as zf:
        for name, data in entries:
            info = zipfile.ZipInfo(name)
            info.compress_type = compression
            zf.writestr(info, data)
    buf.seek(0)
    return buf


def with_doc(data: bytes, edit) -> io.BytesIO:
    parts = members(data)
    doc = json.loads(parts["graphport.json"])
    edit(doc)
    parts["graphport.json"] = json.dumps(doc).encode()
    return build(list(parts.items()))


def refused(f, *words: str) -> gp.ArtifactError:
    with pytest.raises(gp.ArtifactError) as err:
        gp.load(f)
    for word in words:
        assert word in str(err.value)
    assert isinstance(err.value, RuntimeError)
    return err.value


def test_truncated_and_garbage(archive):
    for cut in (0, 10, len(archive) // 2, len(archive) - 5):
        refused(io.BytesIO(archive[:cut]))
    refused(io.BytesIO(b"not a zip at all" * 100), "zip")


def test_compressed_members_are_refused_before_inflating(archive):
    bomb = build([("graphport.json", b"0" * (1 << 20))], compression=zipfile.ZIP_DEFLATED)
    refused(bomb, "compressed")


def test_path_tricks_and_duplicates(archive):
    doc = members(archive)["graphport.json"]
    refused(build([("graphport.json", doc), ("extra/../../etc/passwd", b"x")]), "'..'")
    refused(build([("graphport.json", doc), ("/abs/path", b"x")]), "absolute")
    refused(build([("graphport.json", doc), ("payload.pkl", b"x")]), "unexpected member")
    with pytest.warns(UserWarning):
        dup = build([("graphport.json", doc), ("graphport.json", doc)])
    refused(dup, "twice")


def test_sizes_are_checked_against_the_file(archive):
    data = bytearray(archive)
    central = data.rfind(b"PK\x01\x02")   # the last member's directory entry: lie about its size
    struct.pack_into("<LL", data, central + 20, 0xFFFFFFF0, 0xFFFFFFF0)
    refused(io.BytesIO(bytes(data)))


def test_json_limits(archive):
    doc = members(archive)["graphport.json"]
    deep = b"[" * 100000 + b"]" * 100000
    refused(build([("graphport.json", deep)]), "nests")
    with pytest.raises(gp.ArtifactError, match="more than"):
        ArchiveReader(build([("graphport.json", doc)]), Limits(max_json_bytes=100)).read_json("graphport.json")
    refused(build([("graphport.json", b'{"format": "graphport", "format": "x"}')]), "twice")
    refused(build([("graphport.json", b'{"version": NaN}')]), "NaN")


def test_unknown_major_version_names_both(archive):
    err = refused(with_doc(archive, lambda d: d.update(version=[2, 0])), "2.0", "1.x")
    assert f"{VERSION[0]}.{VERSION[1]}" in str(err)


def test_newer_minor_version_loads(archive):
    gp.load(with_doc(archive, lambda d: d.update(version=[1, 7])))


def test_missing_node_and_unknown_operators(archive):
    def dangling(doc):
        node = next(n for n in doc["graph"]["nodes"] if n["op"] == "call_function")
        node["args"] = {"tuple": [{"node": "nowhere"}]}
    refused(with_doc(archive, dangling), "nowhere")

    def unknown(doc):
        next(n for n in doc["graph"]["nodes"] if n["op"] == "call_function")["target"] = {"op": "aten::nosuch.default"}
    refused(with_doc(archive, unknown), "aten::nosuch")

    def custom(doc):
        next(n for n in doc["graph"]["nodes"] if n["op"] == "call_function")["target"] = {"op": "mylib::fused.default"}
    err = refused(with_doc(archive, custom), "mylib::fused", "not registered")
    assert "import" in err.fix

    def python(doc):
        next(n for n in doc["graph"]["nodes"] if n["op"] == "call_function")["target"] = {"python": "os.system"}
    refused(with_doc(archive, python), "os.system")


def test_tampered_shapes_are_refused_with_the_node_named(archive):
    def tamper(doc):
        node = next(n for n in doc["graph"]["nodes"] if n["name"] == "relu")
        node["meta"]["val"]["tensor"]["shape"][1] = 7
    refused(with_doc(archive, tamper), "node 'relu'")

    def dtype(doc):
        node = next(n for n in doc["graph"]["nodes"] if n["name"] == "relu")
        node["meta"]["val"]["tensor"]["dtype"] = "float64"
    refused(with_doc(archive, dtype), "node 'relu'", "dtype")


def test_safetensors_header_lying_about_offsets(archive):
    parts = members(archive)
    weights = parts["weights.safetensors"]
    (n,) = struct.unpack("<Q", weights[:8])
    header = json.loads(weights[8:8 + n])
    key = next(k for k in header if k != "__metadata__")
    header[key]["data_offsets"] = [0, 1 << 40]
    text = json.dumps(header).encode()
    parts["weights.safetensors"] = struct.pack("<Q", len(text)) + text + weights[8 + n:]
    refused(build(list(parts.items())), "do not fit")
    parts["weights.safetensors"] = struct.pack("<Q", 1 << 60) + weights[8:]
    refused(build(list(parts.items())), "header")


def test_pickle_is_never_read(archive):
    payload = b"\x80\x04cposix\nsystem\n."   # a pickle: must be refused as data, not run
    refused(build([("graphport.json", payload)]), "not valid JSON")


def test_unknown_container_type_names_it(archive):
    def container(doc):
        doc["module_call_graph"][0]["signature"]["out_spec"] = {"type": "mypkg.Fancy", "context": None,
                                                                 "children": ["*"]}
    err = refused(with_doc(archive, container), "mypkg.Fancy")
    assert "import" in err.fix


def test_not_an_exported_program():
    with pytest.raises(gp.ArtifactError, match="ExportedProgram"):
        gp.save(torch.nn.Linear(2, 2), io.BytesIO())


def test_nothing_in_the_file_reaches_the_code_fx_compiles(archive, tmp_path):
    marker = tmp_path / "ran"
    payload = f"__import__('pathlib').Path({str(marker)!r}).touch()"

    def kwarg_key(doc):
        node = next(n for n in doc["graph"]["nodes"] if n["name"] == "relu")
        node["kwargs"] = {f"x=0, **{{}}); {payload}; (": 1}
    refused(with_doc(archive, kwarg_key), "kwargs")

    def comment(doc):
        node = next(n for n in doc["graph"]["nodes"] if n["name"] == "relu")
        node["meta"]["custom"] = {"dict": [["k", f"x\r{payload}"]]}
    refused(with_doc(archive, comment), "line break")

    def placeholder_default(doc):
        doc["graph"]["nodes"][0]["args"] = {"tuple": [4]}
    refused(with_doc(archive, placeholder_default), "arguments")
    assert not marker.exists()


def test_huge_powers_in_size_expressions_are_refused(archive):
    def power(doc):
        doc["shape_contract"]["dims"][0]["expr"] = ["pow", ["int", 10], ["int", 10**9]]
    refused(with_doc(archive, power), "power")
