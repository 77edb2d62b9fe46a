"""The gateway tests' rig: ``ctrlrun gateway`` in its own process in front of the test upstream,
under the default policy (tests_py/support/gateway_rig.py)."""

import pytest

from tests_py.support.gateway_rig import POLICY, Rig


@pytest.fixture
def rig(tmp_path, store_url):
    return Rig(tmp_path, store_url, POLICY)
