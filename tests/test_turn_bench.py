from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks.turn import NO_DECISION_S, Clip, load_dataset, score, summarize
from parley.wav import write_wav


def _clip(turn_end: float) -> Clip:
    return Clip("c", np.zeros(16000, dtype=np.float32), turn_end, "complete")


@pytest.mark.unit
def test_score_counts_cutoffs_and_latency():
    clips = [_clip(1.0), _clip(2.0), _clip(3.0), _clip(1.5)]
    s = score([1.2, 1.9, None, 1.6], clips)  # second one is a false cutoff
    assert s["false_cutoff_rate"] == 0.25
    assert s["latency_mean_s"] == pytest.approx((0.2 + NO_DECISION_S + 0.1) / 3)


@pytest.mark.unit
def test_summary_picks_fastest_under_cap():
    rows = [{"method": "m", "config": "a", "false_cutoff_rate": 0.04, "latency_mean_s": 0.5},
            {"method": "m", "config": "b", "false_cutoff_rate": 0.08, "latency_mean_s": 0.2},
            {"method": "m", "config": "c", "false_cutoff_rate": 0.3, "latency_mean_s": 0.1}]
    s = summarize(rows)["m"]
    assert s["fc<=5%"]["config"] == "a" and s["fc<=10%"]["config"] == "b"


@pytest.mark.unit
def test_load_dataset_format(tmp_path):
    write_wav(tmp_path / "x.wav", np.zeros(1600, dtype=np.float32), 16000)
    (tmp_path / "x.json").write_text(json.dumps({"text": "hi", "kind": "paused", "speech": [[0, 0.05]],
                                                  "pauses": [[0.02, 0.03]], "turn_end": 0.05}))
    (clip,) = load_dataset(tmp_path)
    assert clip.turn_end == 0.05 and clip.kind == "paused"
    with pytest.raises(ValueError):
        load_dataset(tmp_path / "missing")
