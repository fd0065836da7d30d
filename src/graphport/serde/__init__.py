"""Saving and loading exported programs: a zip of JSON and safetensors, no pickle.

    archive.py       the zip container: deterministic writing, defensive reading
    weights.py       weights.safetensors: aligned, memory-mapped on load
    state.py         tensor descriptions, deduplication, binding weights given at load
    symbolic.py      size expressions, symbolic values, the shape environment
    values.py        node arguments and metadata
    targets.py       call targets, looked up among registered operators
    treespec.py      pytree specs of inputs and outputs
    records.py       Record: what an unregistered keyed container type loads as
    graph_json.py    fx graphs and their subgraphs
    program_json.py  the whole program (graphport.json)
    check.py         load-time recomputation of every node's value
    schema.py        schema.json, the JSON Schema of graphport.json, and the check against it
    integrity.py     checksums of the stored weights, written at save and checked at load
    api.py           save / load
"""
from .api import load, save
from .records import Record

__all__ = ["save", "load", "Record"]
