"""benchmarks/serve_load.py end to end on a tiny load: every request answered, the token count
exact (ignore_eos), both modes measured, every block back, the ratios computed from the rows."""

from __future__ import annotations

import json

import pytest

from benchmarks import serve_load

pytestmark = pytest.mark.integration


def test_tiny_load_runs_both_modes_and_returns_every_block(tmp_path):
    out = tmp_path / "serve.json"
    result = serve_load.main(["--clients", "1,2", "--max-tokens", "3", "--min-requests", "2",
                              "--requests-per-client", "1", "--server", "thread", "--json", str(out)])
    assert json.loads(out.read_text())["verdict"] == result["verdict"]
    rows = result["levels"]
    assert sorted((r["mode"], r["clients"]) for r in rows) == [("http", 1), ("http", 2), ("inproc", 1), ("inproc", 2)]
    for r in rows:
        assert r["errors"] == 0, r["error_samples"]
        assert r["tokens"] == r["requests"] * 3
        assert r["free_blocks_after"] == r["total_blocks"]
        assert r["ttft_ms_p50"] > 0 and r["itl_ms_p50"] > 0
    v = result["verdict"]
    by = {r["mode"]: r["aggregate_tok_s"] for r in rows if r["clients"] == 2}
    assert v["http_over_inproc_at_2_per_repeat"] == [round(by["http"] / by["inproc"], 3)]
    assert v["http_over_inproc_at_2"] == v["http_over_inproc_at_2_per_repeat"][0]
    assert v["target_zero_errors"] and v["target_blocks_idle"]


def test_bad_options_are_refused():
    with pytest.raises(SystemExit):
        serve_load.parse_args(["--clients", "one"])
    with pytest.raises(SystemExit):
        serve_load.parse_args(["--max-tokens", "1"])
