"""Suite-wide settings: slow tests (model zoo, large models) run only with GRAPHPORT_SLOW=1."""
import os

import pytest
import torch


def pytest_collection_modifyitems(config, items):
    if os.environ.get("GRAPHPORT_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow: set GRAPHPORT_SLOW=1 (make test-all) to run")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(scope="session")
def torchbind_classes():
    """TorchBind classes compiled from C++ for the custom-object tests (tests/torchbind_classes.py)."""
    from torchbind_classes import compiled_classes
    with compiled_classes() as classes:
        yield classes
