"""The allocator choice of a `parley` process (pipeline/allocator.py): when it re-executes
under jemalloc and when it stays, and that the re-executed process really runs on it."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import pytest

from parley.errors import ParleyError
from pipeline.allocator import MALLOC_CONF, heap_in_use_mb, jemalloc_env, pymalloc_arenas_mb

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


def test_reading_the_heap_leaves_no_cyclic_garbage():
    # the soak reads it after every turn: a CDLL opened per call was a class of garbage a turn
    heap_in_use_mb()
    pymalloc_arenas_mb()
    gc.collect()
    for _ in range(5):
        heap_in_use_mb()
        pymalloc_arenas_mb()
    assert gc.collect() == 0


def test_cpython_arenas_are_counted_as_small_objects_come_and_go():
    # a fresh interpreter: a busy test process has free room in the arenas it already holds
    code = ("import gc\nfrom pipeline.allocator import pymalloc_arenas_mb\n"
            "before = pymalloc_arenas_mb()\nheld = [[i] for i in range(200_000)]\n"  # ~16 MB of small blocks
            "grown = pymalloc_arenas_mb()\ndel held\ngc.collect()\nprint(before, grown, pymalloc_arenas_mb())")
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "PYTHONMALLOC")}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=60, check=True)
    before, grown, after = map(float, out.stdout.split())
    assert grown - before >= 10, out.stdout
    assert after <= grown - 8, out.stdout  # emptied arenas go back


# A loaded process's long-lived objects, then "turns" whose objects live through a few turns
# (so the young collections promote them) and then become cyclic garbage, as a session's do.
_GARBAGE = """
import gc, sys
from collections import deque
from pipeline.allocator import freeze_loaded_objects
loaded = [[i] for i in range(400_000)]
gc.collect()
frozen = freeze_loaded_objects() if sys.argv[1] == "1" else 0
full0 = gc.get_stats()[2]["collections"]
recent = deque(maxlen=20)
for turn in range(1000):
    held = []
    for _ in range(300):
        node = {"turn": turn}
        node["self"] = node
        held.append(node)
        junk = [[] for _ in range(5)]
    recent.append(held)
full = gc.get_stats()[2]["collections"] - full0
pending = len(gc.get_objects(generation=2))
gc.collect()
print(frozen, full, pending - len(gc.get_objects(generation=2)))
"""


def _garbage_run(freeze: bool) -> tuple[int, int, int]:
    out = subprocess.run([sys.executable, "-c", _GARBAGE, "1" if freeze else "0"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120, check=True)
    frozen, full, garbage = map(int, out.stdout.split())
    return frozen, full, garbage


def test_frozen_loaded_objects_let_full_collections_free_a_sessions_garbage():
    # in its own process: freezing is for the process's owner, never for pytest's
    frozen, full, garbage = _garbage_run(freeze=True)
    _, full_before, garbage_before = _garbage_run(freeze=False)
    assert frozen >= 400_000
    # unfrozen, a full collection waits for 100k promotions (a quarter of the 400k): the
    # garbage piles up; frozen, full collections come at CPython's usual pace
    assert full > full_before and garbage * 3 < garbage_before, (full, garbage, full_before, garbage_before)


def test_jemalloc_accounts_for_a_buffer_the_program_holds():
    code = ("import numpy as np\nfrom pipeline.allocator import jemalloc_stats_mb, reexec_under_jemalloc\n"
            "reexec_under_jemalloc()\na = jemalloc_stats_mb()\nx = np.ones(32 << 18, np.float32)\n"
            "b = jemalloc_stats_mb()\nprint(a['allocated'], b['allocated'], b['active'], b['resident'], b['mapped'])")
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"} | {"PARLEY_ALLOCATOR": "jemalloc"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=60, check=True)
    before, allocated, active, resident, mapped = map(float, out.stdout.split())
    assert allocated - before == pytest.approx(32, abs=1), out.stdout  # the 32 MiB array
    assert allocated <= active <= mapped and 0 < resident <= mapped, out.stdout


def test_no_jemalloc_statistics_on_the_system_allocator():
    code = ("from pipeline.allocator import jemalloc_stats_mb, reexec_under_jemalloc\n"
            "reexec_under_jemalloc()\nprint(jemalloc_stats_mb())")
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"} | {"PARLEY_ALLOCATOR": "system"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.strip() == "None", out.stderr
