from __future__ import annotations

import pytest

from .exporters import EXPORTERS


@pytest.fixture(params=list(EXPORTERS))
def ex(request):
    """graphport, then torch.export, with the same API names."""
    return EXPORTERS[request.param]
