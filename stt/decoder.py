"""One Whisper decode of a short buffer on faster-whisper's CTranslate2 model, with a window
shorter than Whisper's 30 s and word timestamps. Up to `decode_workers` threads may decode at
once (CTranslate2 runs each call on a free replica)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext

import numpy as np

from parley.errors import ModelError
from stt.config import TranscriberConfig
from stt.events import Word, append_word

SAMPLE_RATE = 16_000
_FRAMES_PER_S = 100  # mel hop of 10 ms


def _device(config: TranscriberConfig) -> tuple[str, str]:
    import ctranslate2

    device = config.device
    if device == "auto":
        device = "cuda" if ctranslate2.get_cuda_device_count() > 0 else "cpu"
    compute = config.compute_type
    if compute == "auto":
        compute = "float16" if device == "cuda" else "int8"
    return device, compute


class WhisperDecoder:
    """Greedy (or beam) decode of up to `max_window_s` of audio; times relative to its start."""

    # parley.cores.CoreGate: each part of a decode (encoder, generate, word alignment) waits
    # while another stage holds it (a voice session's LLM computing a reply's first tokens at 2
    # threads), and that stage borrows the cores only between parts; None: never
    core_gate = None
    # ...and after a preflight went out (`on_text`), the alignment first gives the reply it asks
    # for this long to begin borrowing the cores: it is asked ~10-30 ms later, by way of the
    # event loop, and an alignment already running would keep it at 1 thread
    lead_expect_s = 0.0
    # the draft preflight's greedy generates (`decode`'s on_draft): one thread and one
    # CTranslate2 replica of their own; None: no drafts (class level: test subclasses skip
    # __init__)
    _drafts: ThreadPoolExecutor | None = None

    def __init__(self, config: TranscriberConfig) -> None:
        from faster_whisper import WhisperModel
        from faster_whisper.tokenizer import Tokenizer
        from faster_whisper.transcribe import get_suppressed_tokens

        from parley.assets import model_path

        self.config = config
        self.device, self.compute_type = _device(config)
        path = model_path(config.model)
        try:
            self.model = WhisperModel(str(path), device=self.device, compute_type=self.compute_type,
                                      cpu_threads=config.cpu_threads,
                                      num_workers=config.decode_workers + int(config.draft_preflight))
        except (RuntimeError, ValueError, OSError) as e:
            raise ModelError(config.model, f"CTranslate2 could not load {path}: {e}") from e
        lang = config.language if self.model.model.is_multilingual else None
        self.tokenizer = Tokenizer(self.model.hf_tokenizer, self.model.model.is_multilingual,
                                   task="transcribe", language=lang)
        self._suppress = list(get_suppressed_tokens(self.tokenizer, [-1]))
        if config.draft_preflight:
            self._drafts = ThreadPoolExecutor(1, thread_name_prefix="stt-draft")

    def warmup(self) -> float:
        """Decode one second of faint noise, so the first utterance pays no first-call costs
        (CTranslate2's first run allocates); -> its seconds."""
        noise = np.random.default_rng(0).normal(0.0, 1e-3, SAMPLE_RATE).astype(np.float32)
        return self.decode(noise)[1]

    def window_frames(self, n_samples: int) -> int:
        c = self.config
        audio_s = n_samples / SAMPLE_RATE
        window_s = min(30.0, max(c.min_window_s, audio_s + c.window_margin_s))
        return round(window_s * _FRAMES_PER_S)

    def decode(self, audio: np.ndarray, prompt: str = "", beam_size: int | None = None, *,
               stages: dict[str, float] | None = None,
               cancelled: Callable[[], bool] | None = None,
               on_text: Callable[[list[Word]], None] | None = None,
               on_draft: Callable[[list[Word]], None] | None = None) -> tuple[list[Word], float]:
        """audio: [N] float32 16 kHz, N <= 30 s. Returns (words, seconds spent).

        `prompt`: text said before the audio (context). (Giving the audio's stable first words
        as a forced decoder prefix instead was measured: CTranslate2 steps through a prefix
        token by token, so it cost the same, x1.01; benchmarks/stt_decode.py.)

        `stages`: filled with the seconds of "encode_s" and "text_s" (generate + word
        alignment, + the repeat check's second decode when one ran). `cancelled`: asked after
        the encoder and again after the generate; when it says True the decode stops there and
        returns no words. A superseded interim so gives its core back ~half-way (the encoder was
        ~45% of a decode), or at least skips the alignment: an interim in its generate when the
        user stopped ran on beside the pause decode, its alignment too (~55 ms of one Zen 1 core
        for 2-3 s of speech, against a generate of 140-195 ms at beam 5).

        `on_text`: called (on this thread) with the words once the generate has them, before
        their word alignment (64-72 ms of one Zen 1 core for 2.4-4.4 s of speech, 12% of a
        pause decode): the same words `decode` returns, with no times yet (each at the
        audio's end). Only called when the alignment cannot change them (`repeat_free`), and
        not for an abandoned decode.

        `on_draft`: called (on the draft thread) with the words of a greedy generate on the
        same encoding, run beside a beam search (beam > 1, `draft_preflight`), when they come
        before the beam's: words to start a reply on ~100 ms sooner (see TranscriberConfig).
        Repeat-free words only, times as for `on_text`; they may differ from the result."""
        t0 = time.perf_counter()
        if len(audio) < SAMPLE_RATE // 10:
            return [], 0.0
        with self._part():
            t_enc = time.perf_counter()
            enc = self._encode(audio)
            t1 = time.perf_counter()
        if stages is not None:
            stages["encode_s"] = t1 - t_enc
        if cancelled is not None and cancelled():
            return [], t1 - t0
        end_s = len(audio) / SAMPLE_RATE
        beam = beam_size or self.config.beam_size
        draft = None
        if on_draft is not None and beam > 1 and self._drafts is not None:
            draft = _Draft(self, enc, prompt, end_s, lambda: cancelled is not None and cancelled(), on_draft)

            def text_first(words: list[Word], on_text=on_text) -> None:  # no draft after these
                draft.beaten()
                if on_text is not None:
                    on_text(words)
            on_text = text_first
        words = self._words(enc, prompt, beam, end_s, cancelled, on_text)
        if draft is not None:
            draft.beaten()
        if cancelled is not None and cancelled():
            if stages is not None:
                stages["text_s"] = time.perf_counter() - t1
            return [], time.perf_counter() - t0
        other_beam = beam if prompt.strip() else 1  # the other decode drops the prompt, or else the beam
        other = (lambda: self._words(enc, "", other_beam, end_s)) if prompt.strip() or beam > 1 else None
        if draft is not None and not prompt.strip():  # that greedy decode has run: the draft
            other = draft.words
        words = drop_unheard_repeat(words, other)
        if stages is not None:
            stages["text_s"] = time.perf_counter() - t1
        return words, time.perf_counter() - t0

    def _part(self, expect_hold_s: float = 0.0) -> AbstractContextManager:
        """One part of a decode (encoder, generate, alignment): after the gate's holder, and
        counted as running while it runs (parley.cores.CoreGate.work)."""
        return self.core_gate.work(expect_hold_s) if self.core_gate is not None else nullcontext()

    def _encode(self, audio: np.ndarray) -> tuple[object, int]:
        """audio [N] -> (encoder output [1, window/2, D], content frames)."""
        from faster_whisper.audio import pad_or_trim

        m = self.model
        features = m.feature_extractor(audio)  # [80, T]
        content_frames = min(features.shape[-1] - 1, 3000)
        window = self.window_frames(len(audio))
        return m.encode(pad_or_trim(features[:, :content_frames], window)), content_frames

    def _words(self, encoded: tuple[object, int], prompt: str, beam_size: int | None, end_s: float,
               cancelled: Callable[[], bool] | None = None,
               on_text: Callable[[list[Word]], None] | None = None) -> list[Word]:
        """One generate + word alignment on the encoded window (from `_encode`); no words, and
        no alignment, when `cancelled` says True after the generate; `on_text` as in `decode`."""
        m, (enc, content_frames) = self.model, encoded
        tokens = self._generate(enc, prompt, beam_size or self.config.beam_size)
        if not tokens:
            return []
        if cancelled is not None and cancelled():
            return []
        previewed = False
        if on_text is not None:
            unaligned = self._unaligned(tokens, end_s)
            if repeat_free(unaligned):
                on_text(unaligned)
                previewed = True
        with self._part(self.lead_expect_s if previewed else 0.0):  # after the reply's first tokens
            aligned = m.find_alignment(self.tokenizer, [tokens], enc, content_frames)[0]
        words: list[Word] = []
        for w in aligned:
            append_word(words, w["word"], min(float(w["start"]), end_s), min(float(w["end"]), end_s),
                        float(w["probability"]))
        return words

    def _generate(self, enc: object, prompt: str, beam_size: int) -> list[int]:
        """The text tokens of one generate on the encoded window; none where Whisper heard no
        speech."""
        # the newest ~120 prompt tokens: context enough, and room left in the 448-token limit
        previous = self.tokenizer.encode(" " + prompt.strip())[-120:] if prompt.strip() else []
        prompt_ids = self.model.get_prompt(self.tokenizer, previous, without_timestamps=True)
        with self._part():
            res = self.model.model.generate(enc, [prompt_ids], beam_size=beam_size, max_length=448,
                                            return_scores=True, return_no_speech_prob=True,
                                            suppress_blank=True, suppress_tokens=self._suppress)[0]
        tokens = [t for t in res.sequences_ids[0] if t < self.tokenizer.eot]
        avg_logprob = res.scores[0] * len(tokens) / (len(tokens) + 1) if tokens else -10.0
        if not tokens or (res.no_speech_prob > self.config.no_speech_threshold and avg_logprob < -1.0):
            return []
        return tokens

    def _unaligned(self, tokens: list[int], end_s: float) -> list[Word]:
        """The words `find_alignment` makes of `tokens` (its split), each at `end_s`."""
        pieces, _ = self.tokenizer.split_to_word_tokens([*tokens, self.tokenizer.eot])
        words: list[Word] = []
        for piece in pieces[:-1]:  # the last piece is the end-of-text token
            append_word(words, piece, end_s, end_s, 1.0)
        return words


class _Draft:
    """A greedy generate on a pause decode's encoding, on the decoder's draft thread beside
    the beam search: its words go to `on_draft` unless the beam's text came first (`beaten`)
    or the decode was given up. `words()`: its words (waits for them)."""

    def __init__(self, decoder: WhisperDecoder, encoded: tuple[object, int], prompt: str, end_s: float,
                 cancelled: Callable[[], bool], on_draft: Callable[[list[Word]], None]) -> None:
        self._lock = threading.Lock()
        self._beaten = False

        def run() -> list[Word]:
            tokens = decoder._generate(encoded[0], prompt, 1)
            words = decoder._unaligned(tokens, end_s) if tokens else []
            with self._lock:  # held across the call: `beaten` returns only after it
                if words and repeat_free(words) and not self._beaten and not cancelled():
                    on_draft(words)
            return words

        self._future: Future = decoder._drafts.submit(run)

    def beaten(self) -> None:
        with self._lock:
            self._beaten = True

    def words(self) -> list[Word]:
        return self._future.result()


_UNHEARD_S = 0.01  # word times are 20 ms alignment steps: under one step is none


def drop_unheard_repeat(words: list[Word], other_decode: Callable[[], list[Word]] | None) -> list[Word]:
    """Whisper can loop on a short buffer: 1.3 s of "including tax" after a pause, prompted
    with "The total comes to $5.20.", gave "Including tax. Including tax." (the copy aligned
    to 0 s), unprompted "including tax."; at a slower speed the unprompted beam search looped
    too and greedy search did not. So a phrase said back to back at the end stays only as
    often as `other_decode` (the same audio decoded without the prompt, or greedily; called
    only then) says it too: a loop rarely survives both, a real "no, no" is in the audio.
    Words aligned to no audio at the end that only say again what was said before them are
    dropped without asking (`other_decode` None: nothing more to ask): "No, no." cut at the
    pause gave "No... No... No...", the third at 1.00-1.00 s, and the other decode looped too;
    "Hello? Hello, is anyone there?" gave the whole question twice more at 2.08-2.08 s, the
    last copy cut short, so no trailing repeat is whole."""
    words = _drop_unheard_tail(words)
    n, copies = _trailing_repeat(words)
    if copies < 2 or other_decode is None:
        return words
    keep = max(1, _copies(other_decode(), words[-n:]))
    return words[:len(words) - n * max(0, copies - keep)]


def repeat_free(words: list[Word]) -> bool:
    """`drop_unheard_repeat` leaves `words` as they are, whatever their times: their last word
    was not said before them (both of its cuts need that)."""
    return bool(words) and all(w.norm != words[-1].norm for w in words[:-1])


def _drop_unheard_tail(words: list[Word]) -> list[Word]:
    """`words` less the run of 0 s words that ends it, when each of those says a word said
    before the run (a loop past the audio's end); else `words`."""
    k = len(words)
    while k > 0 and words[k - 1].end - words[k - 1].start < _UNHEARD_S:
        k -= 1
    said = {w.norm for w in words[:k]}
    return words[:k] if 0 < k < len(words) and all(w.norm in said for w in words[k:]) else words


def _copies(words: list[Word], phrase: list[Word]) -> int:
    """How many times `phrase` is said back to back at the end of `words` (by normalized text)."""
    n, norms, target = len(phrase), [w.norm for w in words], [w.norm for w in phrase]
    c = 0
    while n and len(norms) >= (c + 1) * n and norms[len(norms) - (c + 1) * n:len(norms) - c * n] == target:
        c += 1
    return c


def _trailing_repeat(words: list[Word]) -> tuple[int, int]:
    """(n, copies) of the shortest phrase of n words that ends `words` said twice or more back
    to back; (0, 0) if none."""
    for n in range(1, len(words) // 2 + 1):
        c = _copies(words, words[-n:])
        if c > 1:
            return n, c
    return 0, 0
