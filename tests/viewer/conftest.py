"""One headless Chromium for the viewer's tests, and the helpers that read a page the way a user sees it."""
import pytest

from tests.viewer.browser import Browser, find_chromium

CHROMIUM = find_chromium()


@pytest.fixture(scope="session")
def browser():
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install chromium; .ci/run installs it)")
    b = Browser(CHROMIUM)
    yield b
    b.close()
