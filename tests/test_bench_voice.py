"""The voice latency benchmark against the timed fake session (tests/fake_session.py): latency
read from the stereo WAV equals the fake's configured delay within one 20 ms frame; false
cutoffs and half-sentence replies are counted; malformed entries are skipped and reported.
Each replay runs in real time (~5 s for the two clips)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks.voice import ReplayOptions, parse_compare, run, select_turns
from benchmarks.voice_data import DatasetError, load_conversation
from parley.wav import read_wav, write_wav
from tests.fake_session import FakeSessionConfig, FakeSessionFactory

RATE = 16_000
FRAME_MS = 20.0


def _tone(seconds: float) -> np.ndarray:
    t = np.arange(round(seconds * RATE)) / RATE
    return (0.3 * np.cos(2 * np.pi * 220 * t)).astype(np.float32)


def _silence(seconds: float) -> np.ndarray:
    return np.zeros(round(seconds * RATE), dtype=np.float32)


def _write(d, name: str, parts: list[np.ndarray], text: str, kind: str, pauses, rate: int = RATE, **extra):
    audio = np.concatenate(parts)
    write_wav(d / f"{name}.wav", audio, rate)
    turn_end = (len(audio) - len(parts[-1])) / RATE
    meta = {"text": text, "kind": kind, "speech": [], "pauses": pauses, "turn_end": round(turn_end, 4), **extra}
    (d / f"{name}.json").write_text(json.dumps(meta))


def _two_clips(d):
    """a: 0.5 s of 'speech' ending at 0.7 s; b: 0.4 s, a 0.5 s pause, 0.3 s, ending at 1.4 s."""
    d.mkdir(parents=True, exist_ok=True)
    _write(d, "a-complete", [_silence(0.2), _tone(0.5), _silence(0.3)], "What time is it in Paris", "complete", [])
    _write(d, "b-paused", [_silence(0.2), _tone(0.4), _silence(0.5), _tone(0.3), _silence(0.3)],
           "Set a timer for ten minutes", "paused", [[0.6, 1.1]])
    return d


def _first_audible_ms(wav, turn_end: float) -> float:
    stereo, sr = read_wav(wav)
    assert sr == RATE and stereo.shape[1] == 2
    first = np.flatnonzero(np.abs(stereo[:, 1]) >= 0.01)[0]
    return 1000 * (first / sr - turn_end)


def _fake(**kw):
    return {"fake": lambda: FakeSessionFactory(FakeSessionConfig(**kw))}


@pytest.mark.integration
def test_latency_from_the_wav_matches_the_fake_delay(tmp_path):
    data = _two_clips(tmp_path / "data")
    # malformed entries beside the good ones: reported and skipped, the run goes on
    write_wav(data / "c-nolabels.wav", _tone(0.3), RATE)
    _write(data, "d-8khz", [_silence(0.2), _tone(0.3), _silence(0.2)], "hello there", "complete", [], rate=8000)
    _write(data, "e-late", [_silence(0.2), _tone(0.3)], "hello there", "complete", [])
    meta = json.loads((data / "e-late.json").read_text())
    (data / "e-late.json").write_text(json.dumps({**meta, "turn_end": 5.0}))
    delay = 0.7  # endpoint 0.6 s > the 0.5 s pause: no cutoff
    report = run(data, tmp_path / "out", _fake(reply_delay_s=delay, end_silence_s=0.6, reply_s=0.2,
                                               transcripts=("what time is it in paris", "set a timer for 10 minutes")),
                 progress=False)
    skipped = {s["name"]: s["reason"] for s in report["skipped"]}
    assert set(skipped) == {"c-nolabels", "d-8khz", "e-late"}
    assert "JSON" in skipped["c-nolabels"] and "16 kHz" in skipped["d-8khz"] and "outside" in skipped["e-late"]
    rows = report["turns"]["fake"]
    assert [r["name"] for r in rows] == ["a-complete", "b-paused"]
    out = tmp_path / "out"
    for r in rows:
        assert not r["false_cutoff"] and not r["half_sentence"] and r["end"] == "replied"
        assert abs(r["perceived_ms"] - 1000 * delay) <= FRAME_MS
        assert abs(_first_audible_ms(out / f"{r['name']}.wav", r["turn_end_s"]) - 1000 * delay) <= FRAME_MS
        assert r["transcript"] and r["reply"].startswith("You said")
        # the session's clock readings land on the timeline: this fake stamps the end of
        # speech when it detects it, 0.6 s of silence later
        assert abs(r["vad_lag_ms"] - 600) <= FRAME_MS
    s = report["summary"]["fake"]
    assert abs(s["perceived_ms"]["p50"] - 1000 * delay) <= FRAME_MS and s["false_cutoffs"] == 0
    assert s["stages"]["endpointing"]["p50"] == pytest.approx(600.0, abs=FRAME_MS)
    assert s["stages"]["endpointing"]["overruns"] == 2  # 600 ms against a 250 ms allotment
    for f in ("report.json", "report.md", "latency_histogram.png", "waterfall.png"):
        assert (out / f).stat().st_size > 0
    md = (out / "report.md").read_text()
    assert "| p50 |" in md and "endpointing" in md and "c-nolabels" in md
    assert json.loads((out / "report.json").read_text())["turns"]["fake"][0]["name"] == "a-complete"


@pytest.mark.integration
def test_false_cutoff_and_half_sentence_replies_are_counted(tmp_path):
    data = _two_clips(tmp_path / "data")
    # endpoint 0.2 s < the 0.5 s pause: clip b is answered mid-pause ("set a timer"), then again;
    # clip a is answered after its end, but to a transcript that lacks its last word
    transcripts = ("what time is it in", "set a timer", "set a timer for ten minutes")
    def broken():
        raise TypeError("EndpointingPolicy.__init__() got an unexpected keyword argument")

    sessions = {**_fake(reply_delay_s=0.3, end_silence_s=0.2, reply_s=0.15, transcripts=transcripts),
                "broken": broken}
    report = run(data, tmp_path / "out", sessions, progress=False)
    # a compared configuration that fails is reported; the others' results stay
    assert report["configs"] == ["fake"] and "EndpointingPolicy" in report["failed_configs"]["broken"]
    assert "failed to run: broken" in (tmp_path / "out" / "report.md").read_text()
    a, b = report["turns"]["fake"]
    assert not a["false_cutoff"] and a["half_sentence"] and abs(a["perceived_ms"] - 300) <= FRAME_MS
    assert b["false_cutoff"] and b["perceived_ms"] is None
    assert b["first_agent_s"] == pytest.approx(0.9, abs=0.02)  # 0.3 s after the first half's end
    assert abs(b["reanswer_ms"] - 300) <= FRAME_MS
    assert b["half_sentence"] and [r["covers_end"] for r in b["replies"]] == [False, True]
    assert b["transcript"] == "set a timer for ten minutes"
    s = report["summary"]["fake"]
    assert (s["false_cutoffs"], s["half_sentence_replies"], s["false_cutoff_rate"]) == (1, 2, 0.5)
    assert not any(t["met"] for t in report["targets"] if "half" in t["target"] or "cutoff" in t["target"])


@pytest.mark.unit
def test_a_directory_with_nothing_usable_is_an_error(tmp_path):
    write_wav(tmp_path / "x.wav", _tone(0.2), RATE)
    with pytest.raises(DatasetError):
        load_conversation(tmp_path)
    with pytest.raises(DatasetError):
        load_conversation(tmp_path / "missing")
    (tmp_path / "x.json").write_text("{not json")
    with pytest.raises(DatasetError, match="unreadable JSON"):
        load_conversation(tmp_path)


@pytest.mark.unit
def test_turns_cycle_and_options_validate(tmp_path):
    clips, _ = load_conversation(_two_clips(tmp_path))
    assert [c.name for c in select_turns(clips, 5)] == ["a-complete", "b-paused", "a-complete-r2",
                                                         "b-paused-r2", "a-complete-r3"]
    assert [c.name for c in select_turns(clips, 1)] == ["a-complete"]
    with pytest.raises(ValueError):
        select_turns(clips, 0)
    with pytest.raises(ValueError):
        ReplayOptions(silence_db=3.0)
    with pytest.raises(ValueError):
        ReplayOptions(no_reply_s=10.0, max_turn_s=5.0)


@pytest.mark.unit
def test_compare_specs(tmp_path):
    f = tmp_path / "lk.toml"
    f.write_text("")
    assert parse_compare([f"livekit={f}"], "parley") == {"livekit": f}
    for bad in ([f"{f}"], [f"parley={f}"], [f"a={f}", f"a={f}"], ["a=/no/such.toml"], [f"a b={f}"]):
        with pytest.raises((ValueError, FileNotFoundError)):
            parse_compare(bad, "parley")


@pytest.mark.unit
def test_the_bundled_compare_configs_load_as_session_configs():
    config = pytest.importorskip("pipeline.config", reason="the voice session's config is not in this checkout")
    from pathlib import Path

    files = sorted((Path(__file__).parents[1] / "benchmarks" / "data" / "voice_configs").glob("*.toml"))
    assert len(files) >= 2
    loaded = {f.stem: config.SessionConfig.from_toml(f) for f in files}
    assert loaded["vad-only"].turn_detection == "vad" and loaded["no-speculation"].speculative == "none"


@pytest.mark.integration
def test_the_cli_runs_it_and_prints_the_table(tmp_path, monkeypatch, capsys):
    import benchmarks.voice as voice
    from pipeline import cli

    data = tmp_path / "data"
    data.mkdir()
    _write(data, "a-complete", [_silence(0.2), _tone(0.4), _silence(0.2)], "What time is it", "complete", [])
    seen = {}

    def makers(config, compare):
        seen.update(config=config, compare=compare)
        return _fake(reply_delay_s=0.4, transcripts=("what time is it",), greeting_s=0.4)

    monkeypatch.setattr(voice, "session_makers", makers)
    out = tmp_path / "out"
    assert cli.main(["bench", "voice", "--data", str(data), "--out", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    # the agent's greeting plays out before the first clip: no false cutoff
    assert "| p50 |" in printed and "| false cutoffs | 0 (0%) |" in printed
    assert seen == {"config": None, "compare": []} and (out / "a-complete.wav").exists()
    assert cli.main(["bench", "voice", "--data", str(tmp_path / "missing"), "--out", str(out)]) == 2
    assert "not a directory" in capsys.readouterr().err


@pytest.mark.unit
def test_real_sessions_freeze_their_loaded_models_before_the_first_turn(tmp_path, monkeypatch):
    """Like the `parley` commands: the models load, then leave the collector's reach, so the full
    collection after each reply does not walk them on the event loop (220-290 ms a reply)."""
    import benchmarks.voice as voice
    import pipeline.allocator as allocator
    import pipeline.session as session

    calls = []
    monkeypatch.setattr(session, "load_components", lambda cfg: calls.append(("load", cfg.speculative)) or "models")
    monkeypatch.setattr(allocator, "freeze_loaded_objects", lambda: calls.append(("freeze",)) or 0)
    monkeypatch.setattr(session, "session_factory", lambda cfg, comps: calls.append(("factory", comps)) or "f")
    cfg = tmp_path / "no-spec.toml"
    cfg.write_text('speculative = "none"\n')
    makers = voice.session_makers(None, [f"no-spec={cfg}"])
    assert calls == []  # nothing loads before a configuration's turn comes
    assert makers["no-spec"]() == "f"
    assert calls == [("load", "none"), ("freeze",), ("factory", "models")]
