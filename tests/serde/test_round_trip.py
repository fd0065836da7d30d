"""save then load gives the same program: same text, same bytes when saved again, the
same outputs bit for bit, the same input checks."""
from __future__ import annotations

import collections
import dataclasses
import io
import json
import zipfile

import pytest
import safetensors.torch
import torch

import graphport as gp
from .helpers import round_trip, saved
from .test_hostile import members, with_doc


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(self.fc1(x).relu())


def test_static_program(tmp_path):
    torch.manual_seed(0)
    ep = gp.export(Mlp(), (torch.randn(3, 8),))
    round_trip(ep, tmp_path)


class Derived(torch.nn.Module):
    def forward(self, x, y):
        z = torch.cat([x, y], 0)
        return z * 2, z.shape[0] // 2


def test_dynamic_program_with_derived_dims_checks_inputs_as_the_original(tmp_path):
    b = gp.Dim("b", min=2, max=64)
    ep = gp.export(Derived(), (torch.randn(5, 4), torch.randn(6, 4)), dynamic_shapes={"x": {0: b}, "y": {0: b + 1}})
    loaded = round_trip(ep, tmp_path, ((torch.randn(9, 4), torch.randn(10, 4)), {}))
    assert loaded.range_constraints == ep.range_constraints
    for bad in [(torch.randn(9, 4), torch.randn(9, 4)), (torch.randn(65, 4), torch.randn(66, 4))]:
        with pytest.raises(gp.InputGuardError) as original:
            ep.module()(*bad)
        with pytest.raises(gp.InputGuardError) as again:
            loaded.module()(*bad)
        assert again.value.what == original.value.what


class Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(3))
        self.register_buffer("scratch", torch.ones(3), persistent=False)
        self.scale = torch.tensor([1.0, 2.0, 3.0])    # a lifted constant

    def forward(self, x):
        self.count.add_(1)
        return x * self.scale + self.count + self.scratch


def test_buffer_mutation_and_constants(tmp_path):
    ep = gp.export(Counter(), (torch.randn(2, 3),))
    loaded = round_trip(ep, tmp_path)
    module = loaded.module()
    before = module.count.clone()
    module(torch.ones(2, 3))
    module(torch.ones(2, 3))
    assert torch.equal(module.count, before + 2)
    assert loaded.graph_signature.lifted_tensor_constants == ep.graph_signature.lifted_tensor_constants


class Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(10, 6)
        self.head = torch.nn.Linear(6, 10, bias=False)
        self.head.weight = self.embed.weight
        self.t = torch.nn.Parameter(torch.randn(6, 5).t())    # non-contiguous
        self.register_buffer("empty", torch.zeros(0, 3))

    def forward(self, ids):
        h = self.embed(ids)
        return self.head(h), h @ self.t.t(), self.empty.sum(0)


def test_aliased_non_contiguous_and_empty_weights(tmp_path):
    ep = gp.export(Tied(), (torch.tensor([[1, 2, 3]]),))
    ep.state_dict["head.weight"] = ep.state_dict["embed.weight"]   # as torch.export lists tied weights
    loaded = round_trip(ep, tmp_path)
    sd = loaded.state_dict
    assert sd["embed.weight"] is sd["head.weight"]
    assert sd["t"].stride() == ep.state_dict["t"].stride()
    assert isinstance(sd["t"], torch.nn.Parameter)
    with zipfile.ZipFile(io.BytesIO(saved(ep))) as zf:
        stored = safetensors.torch.load(zf.read("weights.safetensors"))
    assert "embed.weight" in stored and "head.weight" not in stored


def test_weights_are_memory_mapped_and_aligned(tmp_path):
    ep = gp.export(Mlp(), (torch.randn(3, 8),))
    gp.save(ep, tmp_path / "m.gport")
    loaded = gp.load(tmp_path / "m.gport")
    for t in loaded.state_dict.values():
        assert t.data_ptr() % t.element_size() == 0
        assert t.untyped_storage().nbytes() == (tmp_path / "m.gport").stat().st_size   # a view of the mapping


DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
          torch.int8, torch.uint8, torch.uint16, torch.uint32, torch.uint64, torch.bool, torch.float8_e4m3fn,
          torch.float8_e5m2, torch.complex64]


class AllDtypes(torch.nn.Module):
    def __init__(self):
        super().__init__()
        for i, dtype in enumerate(DTYPES):
            raw = torch.arange(7, dtype=torch.float32).reshape(7) - 2
            self.register_buffer(f"b{i}", raw.abs().to(dtype) if not dtype.is_complex else raw.to(dtype) * 1j)

    def forward(self, x):
        return [getattr(self, f"b{i}").clone() for i in range(len(DTYPES))] + [x + 1]


def test_every_safetensors_dtype(tmp_path):
    module = AllDtypes()
    ep = gp.export(module, (torch.randn(2),))
    loaded = round_trip(ep, tmp_path)
    for i, dtype in enumerate(DTYPES):
        assert loaded.state_dict[f"b{i}"].dtype == dtype
        assert torch.equal(loaded.state_dict[f"b{i}"].view(torch.uint8), getattr(module, f"b{i}").view(torch.uint8))


Pair = collections.namedtuple("Pair", ["left", "right"])


@dataclasses.dataclass
class Box:
    a: torch.Tensor
    b: torch.Tensor


gp.register_dataclass(Box)


class Structured(torch.nn.Module):
    def forward(self, pair, d, scale=2.0, flag=True):
        out = pair.left * scale + d["k"][0]
        return Box(out, pair.right.sum(0)), {"n": out.shape[0]}


def test_structured_inputs_and_outputs(tmp_path):
    pair = Pair(torch.randn(3, 2), torch.randn(3, 2))
    ep = gp.export(Structured(), (pair, {"k": [torch.randn(2)]}), {"scale": 3.0})
    loaded = round_trip(ep, tmp_path)
    out = loaded.module()(pair, {"k": [torch.ones(2)]}, scale=3.0)
    assert isinstance(out[0], Box)
    with pytest.raises(gp.InputGuardError):
        loaded.module()(pair, {"k": [torch.ones(2)]}, scale=4.0)


def test_extra_files(tmp_path):
    ep = gp.export(Mlp(), (torch.randn(3, 8),))
    gp.save(ep, tmp_path / "m.gport", extra_files={"notes.txt": "hello", "v": "1"})
    wanted = {"notes.txt": "", "missing": "unchanged"}
    gp.load(tmp_path / "m.gport", extra_files=wanted)
    assert wanted == {"notes.txt": "hello", "missing": "unchanged"}


def test_program_exported_on_meta_saves_structure_and_binds_weights_at_load(tmp_path):
    torch.manual_seed(0)
    real = Mlp()
    with torch.device("meta"):
        skeleton = Mlp()
    ep = gp.export(skeleton, (torch.randn(3, 8),))
    data = saved(ep)
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        assert not any(k.startswith("fc") for k in safetensors.torch.load(zf.read("weights.safetensors")))
    structure = gp.load(io.BytesIO(data))
    assert structure.state_dict["fc1.weight"].device.type == "meta"
    bound = gp.load(io.BytesIO(data), weights=real.state_dict())
    x = torch.randn(3, 8)
    assert torch.equal(bound.module()(x), real(x))
    from safetensors.torch import save_file
    save_file(real.state_dict(), tmp_path / "w.safetensors")
    from_file = gp.load(io.BytesIO(data), weights=tmp_path / "w.safetensors")
    assert torch.equal(from_file.module()(x), real(x))


def test_weights_that_do_not_fit_are_listed(tmp_path):
    with torch.device("meta"):
        skeleton = Mlp()
    data = saved(gp.export(skeleton, (torch.randn(3, 8),)))
    sd = Mlp().state_dict()
    del sd["fc2.bias"]
    sd["fc1.weight"] = torch.zeros(16, 9)
    sd["stray"] = torch.zeros(1)
    with pytest.raises(gp.ArtifactError) as err:
        gp.load(io.BytesIO(data), weights=sd)
    message = str(err.value)
    assert "missing: fc2.bias" in message and "stray" in message and "fc1.weight" in message
    assert isinstance(err.value, RuntimeError)


def test_symbolic_float_and_bool_values(tmp_path):
    class M(torch.nn.Module):
        def forward(self, x):
            return x * (x.shape[0] / 3)
    ep = gp.export(M(), (torch.randn(6, 2),), dynamic_shapes={"x": {0: gp.Dim("n", min=2, max=30)}})
    round_trip(ep, tmp_path, ((torch.randn(9, 2),), {}))


@torch.library.custom_op("gpserde::scale_add", mutates_args=())
def scale_add(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
    return x * alpha + y


@scale_add.register_fake
def _(x, y, alpha):
    return torch.empty_like(x)


def test_custom_op_round_trips_and_is_listed(tmp_path):
    class M(torch.nn.Module):
        def forward(self, x):
            return scale_add(x, x.cos(), 0.5)
    ep = gp.export(M(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: gp.Dim("n", max=16)}})
    round_trip(ep, tmp_path, ((torch.randn(7, 3),), {}))
    with zipfile.ZipFile(io.BytesIO(saved(ep))) as zf:
        assert json.loads(zf.read("graphport.json"))["custom_ops"] == ["gpserde::scale_add.default"]



def test_range_constraints_are_derived_from_the_contract_not_read_back():
    """The file carries range_constraints for older readers; a reader derives them from the
    shape contract, so a file whose copy disagrees loads with the contract's ranges."""
    b = gp.Dim("b", min=2, max=64)
    ep = gp.export(Derived(), (torch.randn(5, 4), torch.randn(6, 4)), dynamic_shapes={"x": {0: b}, "y": {0: b + 1}})
    data = saved(ep)
    assert len(json.loads(members(data)["graphport.json"])["range_constraints"]) == len(ep.range_constraints) == 2
    loaded = gp.load(with_doc(data, lambda doc: doc.update(range_constraints=[])))
    assert loaded.range_constraints == ep.range_constraints
