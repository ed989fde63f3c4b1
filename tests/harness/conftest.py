"""Fixtures of the harness's tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from nexos.machine.config import BuildConfig


@pytest.fixture(scope="session")
def kernel11(build_kernel) -> tuple[BuildConfig, Path]:
    """The LAZY_ALLOC=1 COW_ALLOC=1 kernel, built."""
    cfg = BuildConfig(1, 1)
    return cfg, build_kernel(cfg)
