"""`parley talk` end to end in headless Chromium: a fake microphone plays a spoken question,
then, while the agent answers, a second remark (a 16-bit WAV: 24-bit ones capture silence
without error). The page streams it to the talk server, whose fake session transcribes each
turn with Whisper and answers with a long tone. Checks: the audio that arrived is not silent,
the page shows each transcript, agent audio played and stopped at the interruption, latency
bars were drawn. The screenshot is kept in the test's tmp dir. A second run checks the capture
worklet alone (Chromium's voice processing off): sample-faithful speech, no aliasing."""

from __future__ import annotations

import asyncio
import re
import shutil
import tempfile
import threading
from pathlib import Path

import numpy as np
import pytest

from parley.wav import write_wav
from pipeline.talk import TalkConfig, TalkServer
from tests.fake_session import FakeSessionConfig, FakeSessionFactory
from tests.speech import piper_speech, with_silence

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is a dev dependency")
pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(not (CHROMIUM and DRIVER), reason="needs Debian chromium + chromium-driver (scripts/setup.sh)"),
]
QUESTION = "What time does the pharmacy on Main Street close on Sundays?"
REMARK = "Never mind that one."
TOKEN = "browser-test-token"


class ServerThread:
    """The talk server on its own event loop in a thread (Selenium's calls block)."""

    def __init__(self, config: TalkConfig, factory) -> None:
        self.loop = asyncio.new_event_loop()
        self.server = TalkServer(config, factory)
        self._thread = threading.Thread(target=self.loop.run_forever, name="talk-server", daemon=True)

    def __enter__(self) -> TalkServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(10)
        return self.server

    def __exit__(self, *exc) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


FINAL = "const u = document.querySelector('.turn[data-turn=\"{turn}\"] .utt.final'); return u && u.textContent"
COLOR = "const u = document.querySelector('.utt.{kind}'); return u && getComputedStyle(u).color"
BAR = ("const r = document.querySelector('.turn[data-turn=\"{turn}\"] svg.budget rect.bar-perceived');"
       " return r && r.getAttribute('width')")


def _chromium(wav: Path, profile: str):
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 f"--user-data-dir={profile}", "--use-fake-ui-for-media-stream",
                 "--use-fake-device-for-media-stream", f"--use-file-for-fake-audio-capture={wav}%noloop",
                 "--autoplay-policy=no-user-gesture-required", "--window-size=860,900"):
        opts.add_argument(flag)
    return webdriver.Chrome(options=opts, service=webdriver.ChromeService(executable_path=DRIVER))


def _wait(driver, script: str, timeout: float, what: str):
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.1).until(lambda d: d.execute_script(script))
    except TimeoutException:
        stats = driver.execute_script("return window.parleyStats")
        raise AssertionError(f"timed out waiting for {what}; page stats {stats}") from None


def _wer(ref: str, hyp: str) -> float:
    import jiwer

    norm = lambda s: " ".join(re.sub(r"[^a-z0-9' ]+", " ", s.lower()).split()) or "<empty>"  # noqa: E731
    return jiwer.wer(norm(ref), norm(hyp))


def test_browser_talks_to_the_server(tmp_path):
    from stt import TranscriberConfig, WhisperDecoder, transcribe

    decoder = WhisperDecoder(TranscriberConfig())
    # The reply (6 s of tone) is still playing when the remark starts 2.5 s after the question.
    heard_texts: list[str] = []

    def recognize(audio: np.ndarray) -> str:
        heard_texts.append(transcribe(audio, 16_000, decoder=decoder).text)
        return heard_texts[-1]

    factory = FakeSessionFactory(FakeSessionConfig(reply_s=6.0, end_silence_s=0.5), recognize=recognize)
    mic = np.concatenate([with_silence(piper_speech(QUESTION), 0.8, 2.5), with_silence(piper_speech(REMARK), 0, 2.0)])
    wav = write_wav(tmp_path / "mic.wav", mic, 16_000)
    profile = tempfile.mkdtemp(prefix="chromium-", dir=tmp_path)
    with ServerThread(TalkConfig(port=0, token=TOKEN), factory) as server:
        driver = _chromium(wav, profile)
        try:
            driver.get(server.url())
            driver.find_element("id", "talk").click()
            interim = _wait(driver, COLOR.format(kind="interim"), 15, "an interim transcript")
            final = _wait(driver, FINAL.format(turn=1), 25, "the question's final transcript")
            final_color = driver.execute_script(COLOR.format(kind="final"))
            _wait(driver, "return window.parleyStats.framesPlayed >= 10", 10, "agent audio to play")
            width = float(_wait(driver, BAR.format(turn=1), 5, "the perceived-latency bar"))
            reply = driver.find_element("css selector", '.turn[data-turn="1"] .reply').text
            _wait(driver, "return window.parleyStats.interrupts >= 1", 10, "the interruption")
            _wait(driver, "return window.parleyStats.playbackRms < 0.001", 0.5, "playback to stop")
            remark = _wait(driver, FINAL.format(turn=2), 15, "the remark's final transcript")
            _wait(driver, BAR.format(turn=2), 10, "the second turn's bar")
            stats = driver.execute_script("return window.parleyStats")
            driver.save_screenshot(str(tmp_path / "talk.png"))
        finally:
            driver.quit()
    session = factory.sessions[0]
    heard = np.concatenate(session.received)
    write_wav(tmp_path / "heard.wav", heard, 16_000)  # what the server got, kept beside the screenshot
    # The page shows what the server recognized, and that is the question: Chromium's own
    # voice processing (echo cancellation, noise suppression, gain control) reshapes the
    # audio (correlation 0.7-0.9 with the file; 1.00 with it off), so Whisper tiny may miss
    # a word: WER, not equality.
    assert [final, remark] == heard_texts[:2]
    assert (interim, final_color) == ("rgb(158, 158, 158)", "rgb(0, 0, 0)")  # interim grey, final black
    assert _wer(QUESTION, final) <= 0.3, final
    assert _wer(REMARK, remark) <= 0.5, remark
    assert reply.startswith("You said:"), reply
    assert stats["framesCut"] >= 1, stats  # agent audio was sounding when the user spoke over it
    assert np.abs(heard).max() > 0.1, "the server got silence: is the fake-mic WAV 16-bit?"
    assert session.turn == 2 and session.interrupted == 1 and stats["framesSent"] > 50
    assert stats["outputRate"] == 24_000
    assert stats["maxPlaybackRms"] > 0.05, stats  # the 0.3-amplitude tone was audible at the output
    assert width > 0
    assert (tmp_path / "talk.png").stat().st_size > 10_000


# Chromium's voice processing off, so what arrives is the worklet's doing alone.
RAW_MIC = """const md = navigator.mediaDevices, gum = md.getUserMedia.bind(md);
md.getUserMedia = () => gum({audio: {echoCancellation: false, noiseSuppression: false, autoGainControl: false}});"""


def _best_match(heard: np.ndarray, segment: np.ndarray) -> float:
    """Correlation of `segment` with the stretch of `heard` that matches it best (found per
    segment: Chromium's fake device may slip 10 ms in a silence)."""
    from scipy.signal import correlate

    k = int(np.argmax(correlate(heard, segment, mode="valid", method="fft")))
    return float(np.corrcoef(heard[k : k + len(segment)], segment)[0, 1])


def test_capture_worklet_resamples_faithfully(tmp_path):
    """A 48 kHz file (the context runs at 44.1 kHz: two resamplings) of speech, then a 10 kHz
    tone: the speech arrives at 16 kHz sample-faithful, the tone (above the 8 kHz Nyquist)
    is filtered out instead of folding down to 6 kHz."""
    from parley.audio import resample

    speech = with_silence(piper_speech(QUESTION), 0.8, 0.5)
    t = np.arange(48_000) / 48_000
    tone = 0.3 * np.sin(2 * np.pi * 10_000 * t).astype(np.float32)
    mic = np.concatenate([resample(speech, 16_000, 48_000), tone, np.zeros(48_000, np.float32)])
    wav = write_wav(tmp_path / "mic48k.wav", mic, 48_000)
    factory = FakeSessionFactory()
    with ServerThread(TalkConfig(port=0), factory) as server:
        driver = _chromium(wav, tempfile.mkdtemp(prefix="chromium-", dir=tmp_path))
        try:
            driver.get(server.url())
            driver.execute_script(RAW_MIC)
            driver.find_element("id", "talk").click()
            seconds = len(mic) / 48_000
            _wait(driver, f"return window.parleyStats.framesSent >= {int(seconds * 50)}", seconds + 10, "the file")
        finally:
            driver.quit()
    heard = np.concatenate(factory.sessions[0].received)
    write_wav(tmp_path / "heard.wav", heard, 16_000)
    start = int(0.8 * 16_000)
    windows = [speech[i : i + 4_000] for i in range(start, len(speech) - 4_000, 4_000)]
    corr = [_best_match(heard, w) for w in windows if np.std(w) > 0.02]
    # Most windows match to 0.999+; a loaded machine starves Chromium's audio thread now and
    # then (a dropout inside a window pulls that one down to 0.4-0.9), so: most, not all.
    assert len(corr) >= 6 and np.median(corr) > 0.99 and np.mean(np.array(corr) > 0.98) >= 2 / 3, corr
    gain = np.sqrt(np.sum(heard[: len(speech)] ** 2) / np.sum(speech**2))  # silence pads both ends
    assert 0.9 < gain < 1.1, gain
    # the tone: 0.21 RMS in the file; linear interpolation would fold it to 6 kHz nearly whole
    level = np.sqrt(np.convolve(heard**2, np.ones(1600) / 1600, mode="valid"))
    tone_at = len(speech) + 8_000  # the middle of the tone, give or take the start offset
    assert level[tone_at - 4_000 : tone_at + 4_000].max() < 0.01, level[tone_at - 4_000 : tone_at + 4_000].max()
