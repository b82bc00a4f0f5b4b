"""Test scaffolding. TRITON_INTERPRET must be set before triton (or any kernel module that
imports it) is imported, so it is decided here, before the test modules load."""

from __future__ import annotations

import os
import shutil


def _cuda_present() -> bool:
    # Decided without importing torch's CUDA runtime first: a driver tool or device node.
    return shutil.which("nvidia-smi") is not None or os.path.exists("/dev/nvidia0")


if not _cuda_present():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture(autouse=True)
def _one_torch_thread():
    # Stages share 2 cores in a session; tests keep torch to one intra-op thread so
    # parallel workers (xdist) do not oversubscribe (25-30x slowdowns measured).
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(prev)
