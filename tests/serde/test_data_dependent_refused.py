"""A program with data-dependent sizes is refused at save with a message that says so, rather
than written as an archive that load could not rebuild."""
from __future__ import annotations

import io

import pytest
import torch

import graphport as gp


def test_saving_a_data_dependent_program_names_the_gap_and_a_way_out():
    def positives(x):
        return x[x > 0] * 2
    ep = gp.export(positives, (torch.randn(6),))
    buffer = io.BytesIO()
    with pytest.raises(gp.ArtifactError, match="data-dependent size") as info:
        gp.save(ep, buffer)
    assert "to_torch" in info.value.msg
