"""The allocator choice of a `parley` process (pipeline/allocator.py): when it re-executes
under jemalloc and when it stays, and that the re-executed process really runs on it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from parley.errors import ParleyError
from pipeline.allocator import MALLOC_CONF, jemalloc_env

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[1]
LIB = "libjemalloc.so.2"


def test_jemalloc_is_preloaded_unless_declined_present_or_missing():
    env = jemalloc_env({"PATH": "/bin", "LD_PRELOAD": "libfoo.so"}, LIB)
    assert env == {"PATH": "/bin", "LD_PRELOAD": f"{LIB} libfoo.so", "MALLOC_CONF": MALLOC_CONF}
    assert jemalloc_env({"MALLOC_CONF": "narenas:2"}, LIB)["MALLOC_CONF"] == "narenas:2"  # the user's own
    assert jemalloc_env({"PARLEY_ALLOCATOR": "system"}, LIB) is None
    assert jemalloc_env({"LD_PRELOAD": f"/usr/lib/{LIB}"}, LIB) is None  # already on it: no loop
    assert jemalloc_env({}, None) is None  # not installed: glibc's, as before
    with pytest.raises(ParleyError, match="PARLEY_ALLOCATOR"):
        jemalloc_env({"PARLEY_ALLOCATOR": "tcmalloc"}, LIB)


@pytest.mark.parametrize(("choice", "expected"), [("jemalloc", "jemalloc"), ("system", "system")])
def test_the_reexecuted_process_runs_on_the_chosen_allocator(choice, expected):
    # scripts/setup.sh installs libjemalloc2: without it this fails, as a missing dependency should
    code = ("from pipeline.allocator import allocator_in_use, reexec_under_jemalloc\n"
            "reexec_under_jemalloc()\nprint(allocator_in_use())")
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"} | {"PARLEY_ALLOCATOR": choice}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.strip() == expected, out.stderr
