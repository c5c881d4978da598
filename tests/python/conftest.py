"""Fixtures of the Python package's tests: one context and one collective
per test file, made and closed by every rank (they are collective)."""
import pytest

import shadowsync


@pytest.fixture(scope="module")
def ctx():
    c = shadowsync.Context()
    yield c
    c.close()


@pytest.fixture(scope="module")
def coll(ctx):
    c = shadowsync.Collective(ctx, stage_bytes=1 << 20)
    yield c
    c.close()
