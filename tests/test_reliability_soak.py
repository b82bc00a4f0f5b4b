"""A short soak (benchmarks/soak.py with timed fakes): every turn answered, no error, the engine's
blocks all free after, the last budget report complete, and no live asyncio task or thread left
per session after the sessions close. The long run with the real models is the benchmark's."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.soak import components, level, main, slope_per_100, speech

pytestmark = [pytest.mark.integration]
ROOT = Path(__file__).resolve().parents[1]


def test_a_short_soak_answers_every_turn_and_leaves_nothing_behind(tmp_path):
    out = tmp_path / "soak.json"
    # --no-freeze: freezing is for a process of its own (below), not pytest's
    result = main(["--turns", "5", "--sessions", "2", "--no-freeze", "--out", str(out)])
    (lvl,) = result["levels"]
    assert (lvl["answered"], lvl["lost"], lvl["errors"]) == (10, 0, 0), lvl
    assert lvl["free_blocks"][0] == lvl["free_blocks"][1], lvl["free_blocks"]
    assert lvl["last_budget_complete"]
    assert 0 < lvl["p50_ms"] <= lvl["p90_ms"] < 2000
    assert lvl["tasks"][1] == lvl["tasks"][0], lvl["tasks"]  # no task left behind by a closed session
    if sys.getallocatedblocks():  # pymalloc (the default) counts its blocks
        assert 0 < lvl["during"]["py_blocks"][0] <= lvl["during"]["py_blocks"][1]
        assert lvl["slopes_per_100_turns"]["py_blocks"] is not None
        assert len(lvl["py_blocks_series"]) == 10 and min(lvl["py_blocks_series"]) > 0
    for sess in lvl["per_session"]:  # every question asked after the previous reply played out
        assert sess["history"]["system_first"] and sess["history"]["messages"] == 2 * 5, sess["history"]
    assert out.read_text().startswith("{")


def test_the_memory_slope_is_fitted_after_warm_up():
    flat = [100.0 + (50.0 if i < 2 else 0.0) for i in range(10)]  # a warm-up jump, then flat
    assert slope_per_100(flat) == pytest.approx(0.0, abs=1e-9)
    rising = [100.0 + 0.01 * i for i in range(10)]
    assert slope_per_100(rising) == pytest.approx(1.0)
    assert slope_per_100([1.0]) is None


def test_a_long_session_forgets_what_no_request_will_send_again():
    # a 96-token history budget holds ~4 turns: 12 turns overflow it several times
    cfg, comps = components(False, max_tokens=8, sentence_grace_tokens=0, context_tokens=96)
    lvl = asyncio.run(level(cfg, comps, speech(), 1, 12))
    assert (lvl["answered"], lvl["errors"]) == (12, 0), lvl
    hist = lvl["per_session"][0]["history"]
    assert hist["system_first"] and hist["prompt_tokens"] + 8 < 96, hist
    # the agent keeps the last request's messages and the reply since, not all 25 items
    assert hist["chat_items"] <= hist["messages"] + 1 < 12, hist
    assert hist["session_items"] <= hist["chat_items"], hist


def test_the_soak_freezes_the_session_code_it_runs(tmp_path):
    # as `parley talk` does: the session code (livekit, aiohttp, pydantic, ...) is loaded before
    # the freeze. Frozen after the models alone, ~115k of livekit's objects stayed for every full
    # collection to walk (45 ms each), and full collections came ~100 turns apart
    out = tmp_path / "soak.json"
    subprocess.run([sys.executable, "-m", "benchmarks.soak", "--turns", "2", "--sessions", "1", "--out", str(out)],
                   cwd=ROOT, capture_output=True, text=True, timeout=300, check=True)
    result = json.loads(out.read_text())
    assert result["levels"][0]["answered"] == 2
    assert result["gc_frozen_objects"] > 200_000, result["gc_frozen_objects"]
    assert result["gc_unfrozen_objects"] < 20_000, result["gc_unfrozen_objects"]


# run in a fresh interpreter: in a busy test process the allocator may hand back pages it
# already has resident, and the buffer then moves no RSS at all
_SPLIT = """
import json
import numpy as np
from benchmarks.soak import rss_mb, rss_split_mb
before, rss = rss_split_mb(), rss_mb()
buf = np.ones(64 << 18, np.float32)  # 64 MiB, every page touched
print(json.dumps([before, rss, rss_split_mb()]))
"""


def test_the_rss_split_adds_up_and_puts_a_buffer_in_anonymous_memory():
    from benchmarks.soak import SPLIT

    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    out = subprocess.run([sys.executable, "-c", _SPLIT], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=60, check=True)
    before, rss, after = json.loads(out.stdout)
    resident = sum(v for k, v in before.items() if k not in ("lazy_free", "anon_huge"))  # within the others
    assert set(before) == set(SPLIT) and min(before.values()) >= 0
    assert resident == pytest.approx(rss, abs=4.0)
    assert after["anon"] - before["anon"] == pytest.approx(64, abs=4), (before, after)
    assert abs(after["file"] - before["file"]) < 4 and abs(after["stacks"] - before["stacks"]) < 1
