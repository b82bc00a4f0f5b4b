"""benchmarks/speculative.py end to end on the embedded model, tiny: every method's greedy
output equals plain decoding, repeats pool their rows, the metrics are consistent."""

from __future__ import annotations

import json

import pytest


@pytest.mark.integration
@pytest.mark.slow
def test_speculative_benchmark_runs_and_outputs_match(tmp_path):
    import torch

    from benchmarks.speculative import DATA, main

    out = tmp_path / "spec.json"
    old = torch.get_num_threads()
    try:
        results = main(["--weights", "bf16", "--max-tokens", "6", "--repeats", "2", "--json", str(out)])
    finally:
        torch.set_num_threads(old)
    n_prompts = len(json.loads(DATA.read_text())["chats"])
    res = results["bf16"]
    assert set(res) == {"plain", "ngram", "head", "auto"}
    for name, r in res.items():
        assert len(r["rows"]) == 2 * n_prompts
        assert r["all"]["mean_accepted_length"] >= 1.0 and 0.0 <= r["all"]["acceptance_rate"] <= 1.0
        if name != "plain":
            assert r["identical_greedy"] is True, name
        for row in r["rows"]:
            assert row["accepted"] <= row["drafted"] and row["emitted"] <= 6
    assert res["plain"]["all"]["acceptance_rate"] == 0.0
    assert json.loads(out.read_text())["args"]["repeats"] == 2


@pytest.mark.unit
def test_cli_forwards_every_option(monkeypatch):
    import benchmarks.speculative as bench
    from pipeline.cli import main as cli

    seen = []
    monkeypatch.setattr(bench, "main", lambda argv, prog: seen.append(argv) or {})
    assert cli(["bench", "speculative", "--repeats", "2", "--fixed-k", "--head", "h.safetensors", "--k", "3",
                "--weights", "int8"]) == 0
    (argv,) = seen
    assert argv[argv.index("--repeats") + 1] == "2" and argv[argv.index("--k") + 1] == "3"
    assert "--fixed-k" in argv and argv[argv.index("--head") + 1] == "h.safetensors"
    assert argv[argv.index("--weights") + 1] == "int8"
