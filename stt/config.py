"""Configuration of the streaming transcriber (frozen, validated)."""

from __future__ import annotations

from dataclasses import dataclass

MODEL_KEYS = ("whisper-tiny.en", "whisper-base")


@dataclass(frozen=True)
class TranscriberConfig:
    model: str = "whisper-tiny.en"  # a parley.assets key
    device: str = "auto"  # "auto" (CUDA when present), "cpu" or "cuda"
    compute_type: str = "auto"  # "auto": int8 on the CPU, float16 on CUDA
    # 2 shared cores: one thread per stage (see ASSETS thread budgets). 2 threads made the pause
    # decode slower beside other jobs (x1.05 at load ~8, x1.6 beside one busy core), so the
    # session's budget stays explicit here, per replica.
    cpu_threads: int = 1
    # Model replicas decoding at once: a flush that comes while an interim decode runs starts
    # its own decode on the second one at once instead of waiting (the interim is abandoned).
    decode_workers: int = 2
    # Beam 5 (faster-whisper's default) cost only ~10-20% more than greedy per short-window
    # decode here, and greedy interims committed "life" for "lights" on espeak speech.
    beam_size: int = 5  # interim decodes
    # The decodes whose text is final (at a pause, at flush): beam 5. Side by side on the 21
    # held-out turns (benchmarks/results/2026-12-04-cpu2zen4-stt.json, real time): after a +250
    # ms flush p50/p90 30/90 ms with beam 5, 11/80 with beam 3, same WER; but on the
    # Piper/espeak test clips beam 3 got two words more wrong ("my life's the kitchen"), beam 2
    # three (and a word more wrong in three earlier held-out runs). A beam step costs ~7.5 ms
    # at beam 5 vs ~4.6 ms greedy on one core (whisper-tiny.en; the first ~15 ms more).
    final_beam_size: int = 5
    commit_guard_s: float = 0.3  # words ending this close to the buffer's end are never stable
    # Two interim decodes that agree on a word make it stable only where both gave it at least
    # this probability. Espeak's "turn off the lights", decoded as "my life's" at p 0.58 and
    # 0.51, stayed in the final although the turn's own decode heard "lights" (0.79): the test
    # clips' streaming WER 7.1% vs 4.0% offline with numpy's BLAS at one thread (a knife-edge
    # the thread count of the mel features' matmul flipped), 5.1% at 0.6. Side by side on the
    # Zen 1 host (benchmarks/stt.py, real time, +250 ms flush): held-out voices 1.99% WER either
    # way, Piper + pauses 9.26% -> 8.95%, final latency unchanged (p50 424 vs 422 ms, 530 vs 519).
    commit_min_probability: float = 0.6
    language: str = "en"
    # Re-decode the utterance after this much new speech. 0.5 s on tiny.en costs ~65 ms of one
    # core per decode (10 s window), so ~15% CPU while the user speaks.
    interval_s: float = 0.5
    # Minimum encoder window. Padding only to max(10 s, audio + 1 s) instead of Whisper's 30 s
    # was 6.5x cheaper with no WER loss (42 turns, tiny.en); shorter windows lost accuracy: 6 s
    # for the pause decodes x0.81 the time, but streaming WER 7.2% vs 4.6%; 8 s for all 10.3%
    # (loops: "boil an egg an egg"). Padding the audio instead of the features was far worse.
    min_window_s: float = 10.0
    window_margin_s: float = 1.0
    max_window_s: float = 28.0  # past this the buffer is cut even if nothing is stable
    trim_s: float = 15.0  # cut the buffer at the stable prefix once it is this long
    # VAD gating (Silero, the onnx model bundled with faster-whisper).
    vad_threshold: float = 0.5
    vad_neg_threshold: float = 0.35
    speech_pad_s: float = 0.2  # silence kept on each side of speech
    # A pause this long ends a speech run: the utterance so far is decoded and committed
    # (preflight), and that decode is the final when the flush comes before more speech. 3 VAD
    # windows (96 ms): at 200 ms the decode (~150-190 ms on one loaded core) was still running
    # when a flush came 250 ms after the speech, and the final waited for it.
    endpoint_silence_s: float = 0.09
    # Start the pause decode at the first silent VAD window instead of after endpoint_silence_s;
    # if speech comes back first it counts as an interim, not a pause. Measured (benchmarks/stt.py
    # --variant, 21 held-out turns, real time): the decode the final comes from was planned 36-42
    # ms after the last word instead of 91-94 ms (Silero's last speech window ends ~6 ms after
    # it), with the same WER (4.1-5.2% vs 4.6%, one word either way); 32 instead of 96 ms of
    # trailing silence changed no tail word (benchmarks/stt_decode.py).
    tentative_pause: bool = True
    # Send a pause decode's preflight once its words are known, before their word alignment
    # (64-72 ms of a ~560 ms decode on one Zen 1 core): the turn detector waits for these
    # words. Only where the text alone says which words are new (Utterance.preview).
    early_preflight: bool = True
    # ...and before that, the words of a greedy generate on the same encoding, run beside the
    # beam search on a replica and thread of its own, when they come first: a reply can start
    # on them, and it is kept when the final says the same; a preflight that differs is
    # followed by the beam's. 21 held-out turns, real time (benchmarks/stt.py --variant default
    # no-draft --flush-delay 1.0, Zen 1): the first preflight after the speech p50 / p90 513 /
    # 657 ms vs 609 / 712, the final's words in 19 of 21, WER unchanged. Whole clips of 5
    # synthesizer families, one encoding: the same words as beam 5 in 74% (espeak paused 44%).
    draft_preflight: bool = True
    no_speech_threshold: float = 0.6
    # When the flush needs a decode of its own (speech went on until the flush, so no pause
    # decode covers it), decode only the audio after the stable prefix (prompted with it):
    # fewer tokens to decode where latency counts. Pause decodes take the whole utterance
    # unless pause_from_stable.
    flush_from_stable: bool = True
    # Acoustic context kept before that cut: with none, short tails decoded alone went wrong
    # ("ten minutes late" -> "10 it's late"; +5 WER points on the test clips).
    cut_context_s: float = 1.0
    # Also cut at a pause (not only at flush): benchmarks/stt.py, real time, 12 clips, shared
    # 2 cores: finalization p50/p90 0.05/62 ms vs 91/197 ms, but WER 4.5% vs 3.8% there and
    # 6.1% vs 4.0% (offline) on the test clips, so off by default.
    pause_from_stable: bool = False
    # ...but in a long turn: once the buffer holds this much audio (s), a pause decode starts at
    # the stable prefix too (None: never). A 12 s turn's whole-utterance pause decode took 1.3 s
    # of one Zen 1 core (encoder 0.51 s, beam-5 text 0.79 s), and its words came 1.4 s after
    # the user stopped. On 8 turns of 7-11 s by held-out voices (benchmarks/stt.py --voices
    # long, real time, flush +250 ms, Zen 1): final p50/p90 742/857 ms never, 472/575 ms after
    # 6 s, 442/557 after 4 s, WER 2.45% all three. 6 s keeps every short request's decode as
    # it was (the cut measured above cost WER there).
    pause_from_stable_after_s: float | None = 6.0
    # After a pause, decode only the speech after it (whisper_streaming resets its buffer
    # there). Off: tiny.en decoding the 1.3-1.6 s after a pause alone looped ("$5.20.
    # Including tax. Including tax."), prompted or not; with the speech before it in the
    # window it did not. 59 synthesized clips (Piper at 3 speeds, espeak), fast replay: WER
    # 9.4% off vs 12.5% on; benchmarks/stt.py --pauses (26 clips, real time, shared 2 cores):
    # 6.1% both, finalization p50/p90 0.07/105 ms off vs 40/107 ms on.
    restart_at_pause: bool = False

    def __post_init__(self) -> None:
        if self.model not in MODEL_KEYS:
            raise ValueError(f"model must be one of {MODEL_KEYS}, got {self.model!r}")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"device must be auto, cpu or cuda, got {self.device!r}")
        if self.decode_workers < 1:
            raise ValueError("decode_workers must be >= 1")
        if not 0.0 <= self.commit_min_probability < 1.0:
            raise ValueError("commit_min_probability must be in [0, 1)")
        if self.cpu_threads < 1 or self.beam_size < 1 or self.final_beam_size < 1 or self.commit_guard_s < 0:
            raise ValueError("cpu_threads, beam sizes must be >= 1 and commit_guard_s >= 0")
        if not 0.05 <= self.interval_s <= 10:
            raise ValueError("interval_s must be in [0.05, 10]")
        if not 1.0 <= self.min_window_s <= self.max_window_s <= 30.0:
            raise ValueError("need 1 <= min_window_s <= max_window_s <= 30")
        if not 1.0 <= self.trim_s <= self.max_window_s:
            raise ValueError("trim_s must be in [1, max_window_s]")
        if not 0.0 < self.vad_neg_threshold <= self.vad_threshold < 1.0:
            raise ValueError("need 0 < vad_neg_threshold <= vad_threshold < 1")
        if self.pause_from_stable_after_s is not None and not self.pause_from_stable_after_s > 0:
            raise ValueError("pause_from_stable_after_s must be > 0 (None: never)")
        if self.cut_context_s < 0 or self.speech_pad_s < 0 or self.endpoint_silence_s <= 0 or self.window_margin_s < 0:
            raise ValueError("speech_pad_s, window_margin_s must be >= 0 and endpoint_silence_s > 0")
