"""The session's VAD probabilities drive the transcriber's speech gate (`push(...,
speech_probs=)`): one per 512-sample window completed by a push, windows counted over the
whole stream; with them the gate's own Silero model is never loaded."""

from __future__ import annotations

import numpy as np
import pytest

from parley.errors import AudioFormatError
from stt import FakeTranscriber, StreamingTranscriber, TranscriberConfig
from stt.speech_gate import CHUNK, SpeechGate, windows_completed
from tests.speech import piper_speech, with_silence

TEXTS = ("Please send the report to Maria. She needs it by Friday.",
         "Could you book a table for two people at the Italian place tonight?")


class SessionVAD:
    """What the voice session does: turn_detection's Silero (the silero-vad package's v6
    onnx) run once per window over the whole stream; `push` returns the probabilities of the
    windows a frame completes."""

    def __init__(self) -> None:
        from turn_detection.vad import SileroVAD

        self.vad = SileroVAD()
        self.state, self.context = self.vad.new_state()
        self.pending = np.zeros(0, np.float32)

    def push(self, frame: np.ndarray) -> list[float]:
        buf = np.concatenate([self.pending, frame])
        out = []
        for i in range(len(buf) // CHUNK):
            p, self.state, self.context = self.vad.window_probability(buf[i * CHUNK:(i + 1) * CHUNK],
                                                                      self.state, self.context)
            out.append(p)
        self.pending = buf[len(buf) // CHUNK * CHUNK:]
        return out


def _clip() -> np.ndarray:
    return np.concatenate([with_silence(piper_speech(t), 0.4, 0.6) for t in TEXTS])


def _kept(gate: SpeechGate, audio: np.ndarray, vad: SessionVAD | None) -> tuple[set[int], np.ndarray]:
    """(indices of the clip's 512-sample windows with sound the gate keeps, the kept audio),
    fed as 20 ms frames (silent windows are all alike, so only windows with sound are named)."""
    index = {audio[i * CHUNK:(i + 1) * CHUNK].tobytes(): i for i in range(len(audio) // CHUNK)}
    kept: list[np.ndarray] = []
    for i in range(0, len(audio), 320):
        frame = audio[i:i + 320]
        kept += gate.feed(frame, None if vad is None else vad.push(frame))
    return {index[k.tobytes()] for k in kept if k.any()}, np.concatenate(kept)


@pytest.mark.integration
def test_gate_fed_session_probabilities_keeps_the_same_speech():
    from stt import transcribe

    audio = _clip()
    sounding = {i for i in range(len(audio) // CHUNK) if np.abs(audio[i * CHUNK:(i + 1) * CHUNK]).max() > 0.01}
    own, own_audio = _kept(SpeechGate(), audio, None)
    gate = SpeechGate()
    shared, shared_audio = _kept(gate, audio, SessionVAD())
    assert not gate.model_loaded  # probabilities given for every window: no onnx session
    # both keep every window with audible sound; the two v6 exports differ in dips inside
    # words (the package's stays higher), so only pad windows differ
    assert sounding <= own and sounding <= shared, (sorted(sounding - own), sorted(sounding - shared))
    assert len(own ^ shared) <= 0.05 * len(sounding)
    assert transcribe(own_audio).text == transcribe(shared_audio).text


@pytest.mark.integration
def test_transcriber_with_session_probabilities():
    audio = _clip()
    vad = SessionVAD()
    with StreamingTranscriber(TranscriberConfig()) as st:
        for i in range(0, len(audio), 320):
            frame = audio[i:i + 320]
            st.push(frame, speech_probs=vad.push(frame))
            st.wait_idle()
        final = st.flush(timeout=60)
        assert not st._gate.model_loaded
    words = final.text.lower()
    assert "she needs it by friday" in words and "table for two people at the italian place tonight" in words, words


@pytest.mark.unit
def test_window_count_runs_over_the_whole_stream():
    assert windows_completed(0, 320) == 0 and windows_completed(320, 320) == 1
    assert windows_completed(500, 1100) == 3  # windows end at 512, 1024, 1536
    gate = SpeechGate()
    with pytest.raises(AudioFormatError, match="completes 1"):
        gate.feed(np.zeros(600, np.float32), [])
    assert gate.fed == 0 and gate.pending_samples == 0  # the bad feed changed nothing
    assert gate.feed(np.zeros(600, np.float32), [0.0]) == []
    gate.new_turn()  # a new turn keeps the alignment: 600 + 424 = the 2nd window's end
    gate.feed(np.zeros(424, np.float32), [0.0])
    assert gate.pending_samples == 0 and not gate.model_loaded
    with pytest.raises(AudioFormatError, match="probabilities"):
        gate.feed(np.zeros(512, np.float32), [1.5])


@pytest.mark.integration
def test_push_rejects_a_wrong_count_and_keeps_alignment_over_reset_and_flush():
    with StreamingTranscriber(TranscriberConfig()) as st:
        st.push(np.zeros(300, np.float32), speech_probs=[])
        with pytest.raises(ValueError, match="completes 1"):
            st.push(np.zeros(300, np.float32), speech_probs=[])
        with pytest.raises(AudioFormatError):
            st.push(np.zeros(300, np.float32), speech_probs=[0.1, 0.1])
        st.reset()  # 300 samples in: the next 300 still complete window 1
        st.push(np.zeros(300, np.float32), speech_probs=[0.0])
        assert st.flush(timeout=30).text == ""
        st.push(np.zeros(8000, np.float32), 8000, speech_probs=[0.0] * 31)  # 16,000 at 16 kHz: 600 -> 16,600
        st.push(np.zeros(808, np.float32), speech_probs=[0.0, 0.0])  # -> 17,408 = 34 windows
        assert st.wait_idle(30)
        assert st._gate.fed == 17_408 and st._gate.pending_samples == 0
        assert not st._gate.model_loaded


@pytest.mark.unit
def test_fake_takes_the_same_keyword():
    fake = FakeTranscriber(["one two three"], words_per_s=10)
    with pytest.raises(AudioFormatError):
        fake.push(np.zeros(600, np.float32), speech_probs=[])
    fake.push(np.zeros(600, np.float32), speech_probs=[1.0])
    evs = fake.push(np.zeros(16_000 - 600, np.float32), speech_probs=[0.9] * 29 + [0.0])
    # speech is the windows the VAD called speech (30 x 32 ms), not the (silent) samples
    assert evs and evs[-1].kind == "preflight" and fake.flush().text == "one two three"
