"""Programs whose inputs or outputs are library containers load where the library is not
imported: a fresh process (the command line's inspect, run and view) gets each unregistered
container whose context is its keys as a Record, never an import of a module named in the
file. With the library imported, its own classes come back."""
from __future__ import annotations

import dataclasses
import io
import json
import subprocess
import sys
import textwrap

import pytest
import torch

import graphport as gp
from graphport.serde import Record
from .helpers import saved
from .test_hostile import refused, with_doc

TINY_BERT = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64,
             "vocab_size": 100, "max_position_embeddings": 64}
BERT_OUTPUT = "transformers.modeling_outputs.BaseModelOutputWithPoolingAndCrossAttentions"


def fresh_python(code: str, cwd) -> subprocess.CompletedProcess:
    """Run `code` in a new interpreter (PYTHONPATH is inherited, so this checkout's graphport)."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


def cli(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "graphport", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


@pytest.fixture(scope="module")
def bert_file(tmp_path_factory):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = transformers.BertModel(transformers.BertConfig(**TINY_BERT)).eval()
    ids = torch.randint(0, 100, (2, 7))
    ep = gp.export(model, (), {"input_ids": ids, "attention_mask": torch.ones_like(ids)})
    path = tmp_path_factory.mktemp("bert") / "bert.gport"
    gp.save(ep, path)
    return path


@pytest.mark.slow
def test_the_command_line_reads_a_program_with_model_outputs_in_a_fresh_process(tmp_path):
    """`graphport export --hf bert`, then inspect, run and view, each in its own process."""
    pytest.importorskip("transformers")
    (tmp_path / "tiny.json").write_text(json.dumps(TINY_BERT))
    exported = cli("export", "--hf", "bert", "--config", "tiny.json", "-o", "bert.gport", cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    inspected = cli("inspect", "bert.gport", cwd=tmp_path)
    assert inspected.returncode == 0, inspected.stderr
    assert "outputs:" in inspected.stdout
    ids, mask = torch.randint(0, 100, (2, 7)), torch.ones(2, 7, dtype=torch.int64)
    from safetensors.torch import load_file, save_file
    save_file({"input_ids": ids, "attention_mask": mask}, str(tmp_path / "in.st"))
    ran = cli("run", "bert.gport", "--inputs", "in.st", "-o", "out.st", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    viewed = cli("view", "bert.gport", "-o", "bert.html", cwd=tmp_path)
    assert viewed.returncode == 0, viewed.stderr
    from transformers import modeling_outputs   # noqa: F401 -- the library's own classes: the reference
    expected = gp.load(tmp_path / "bert.gport").module()(input_ids=ids, attention_mask=mask)
    assert type(expected).__name__ == "BaseModelOutputWithPoolingAndCrossAttentions"
    got = load_file(str(tmp_path / "out.st"))
    assert torch.equal(got["output_0"], expected.last_hidden_state)
    assert torch.equal(got["output_1"], expected.pooler_output)


def test_without_the_library_outputs_are_records_that_save_back_as_the_library_type(bert_file):
    """A fresh process that never imports transformers: the output is a Record with the
    same keys, values and access, and saving the loaded program gives the same bytes."""
    child = fresh_python(f"""
        import io, sys, torch
        import graphport as gp
        from graphport.serde import Record
        ep = gp.load({str(bert_file)!r})
        assert "transformers" not in sys.modules, "loading imported transformers"
        torch.manual_seed(0)
        ids = torch.randint(0, 100, (2, 7))
        out = ep.module()(input_ids=ids, attention_mask=torch.ones(2, 7, dtype=torch.int64))
        assert type(out) is Record and out.type_name == {BERT_OUTPUT!r}, type(out)
        assert list(out) == ["last_hidden_state", "pooler_output"]
        assert out.last_hidden_state is out["last_hidden_state"] is out[0] and out[1] is out.pooler_output
        assert out.to_tuple() == (out[0], out[1])
        buf = io.BytesIO()
        gp.save(ep, buf)
        assert buf.getvalue() == open({str(bert_file)!r}, "rb").read(), "saved back differently"
        torch.save(dict(out), {str(bert_file.parent / "record.pt")!r})
        assert "transformers" not in sys.modules
    """, cwd=bert_file.parent)
    assert child.returncode == 0, child.stderr[-3000:]
    from transformers import modeling_outputs   # noqa: F401 -- the library's own classes: the reference
    torch.manual_seed(0)
    ids = torch.randint(0, 100, (2, 7))
    expected = gp.load(bert_file).module()(input_ids=ids, attention_mask=torch.ones(2, 7, dtype=torch.int64))
    assert type(expected).__name__ == "BaseModelOutputWithPoolingAndCrossAttentions"
    got = torch.load(bert_file.parent / "record.pt")
    assert got.keys() == expected.keys()
    assert all(torch.equal(got[k], expected[k]) for k in got)


@dataclasses.dataclass
class Unregistered:
    """Stands for a library container: its saved spec names a type no process registers."""
    scores: torch.Tensor
    hidden: torch.Tensor


class WithDataclassOutput(torch.nn.Module):
    def forward(self, x):
        return Unregistered(x.sin(), x.cos())


@pytest.fixture(scope="module")
def dataclass_archive() -> bytes:
    gp.register_dataclass(Unregistered, serialized_type_name="some.library.Unregistered")
    try:
        return saved(gp.export(WithDataclassOutput(), (torch.randn(3),)))
    finally:
        gp.pytree.pytree._deregister_pytree_node(Unregistered)


def test_an_unregistered_keyed_container_loads_as_a_record(dataclass_archive):
    ep = gp.load(io.BytesIO(dataclass_archive))
    x = torch.randn(3)
    out = ep.module()(x)
    assert isinstance(out, Record) and out.type_name == "some.library.Unregistered"
    assert torch.equal(out.scores, x.sin()) and torch.equal(out["hidden"], x.cos())
    assert saved(ep) == dataclass_archive
    assert "Record('some.library.Unregistered'" in repr(out)
    with pytest.raises(AttributeError, match="no field 'logits'"):
        out.logits


def test_a_container_whose_context_is_not_its_keys_still_names_the_type(dataclass_archive):
    def duplicate_keys(doc):
        spec = doc["module_call_graph"][0]["signature"]["out_spec"]
        spec["context"] = ["scores", "scores"]
    err = refused(with_doc(dataclass_archive, duplicate_keys), "some.library.Unregistered")
    assert "import" in err.fix
