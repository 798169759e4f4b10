import shutil

import pytest

from tests.conftest import running_in_ci


@pytest.fixture
def promtool() -> str:
    """Debian's promtool (the prometheus package); in CI its absence is a failure, never a skip."""
    binary = shutil.which("promtool")
    if binary is None:
        if running_in_ci():
            pytest.fail("promtool is not installed; CI must install it (apt-get install prometheus)")
        pytest.skip("promtool is not installed (apt-get install prometheus)")
    return binary
