"""benchmarks/llm_engine.py's command line: the JSON it writes keeps the machine block beside
the figures (the run itself loads four engines: measured by hand, not here)."""

from __future__ import annotations

import json

import pytest

import benchmarks.llm_engine as bench

pytestmark = pytest.mark.unit


def test_the_json_names_the_machine_beside_the_figures(tmp_path, monkeypatch):
    figures = {"by_threads": {"1": {"ours_int8_b1_tok_s": 100.0, "llama_cpp_b1_tok_s": 80.0}}}
    monkeypatch.setattr(bench, "run", lambda *a: json.loads(json.dumps(figures)))
    monkeypatch.setattr(bench, "table", lambda res: "table")
    out = tmp_path / "llm.json"
    bench.main(["--threads", "1", "--json", str(out)])
    res = json.loads(out.read_text())
    assert res["by_threads"] == figures["by_threads"]
    assert res["machine"]["cpu"] and res["machine"]["cores"] >= 1
    assert "load_avg_1m_end" in res["machine"]
