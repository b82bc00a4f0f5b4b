"""Where one decode's words meet the stable ones: no word said once is repeated, no word said
twice ("no, no") is merged, none is dropped. Decoder outputs are scripted (some copied from
tiny.en decodes of Piper speech), so these run without a model."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from stt.agreement import HypothesisBuffer
from stt.config import TranscriberConfig
from stt.decoder import SAMPLE_RATE, WhisperDecoder, drop_unheard_repeat, repeat_free
from stt.events import Word, append_word, join_words
from stt.utterance import Utterance

pytestmark = pytest.mark.unit


def W(*spec: tuple[str, float, float]) -> list[Word]:
    """Words from Whisper-style pieces: (" word" or ".20" without a space, start, end)."""
    words: list[Word] = []
    for raw, s, e in spec:
        append_word(words, raw, s, e, 0.9)
    return words


def committed(*spec: tuple[str, float, float]) -> HypothesisBuffer:
    h = HypothesisBuffer()
    h.commit(W(*spec))
    return h


# -- the stable prefix against one decode (decodes copied from tiny.en runs) ------------------
def test_word_after_a_pause_is_kept_when_the_stable_word_ends_later_in_this_decode():
    # " ready." ended at 1.58 s when it became stable; this decode ends " ready" at 1.34 s and
    # puts " it" at 1.34-1.64: a cut by time alone (start > 1.48 s) dropped " it"
    h = committed((" Your", 0.0, 0.42), (" order", 0.42, 0.64), (" is", 0.68, 0.92), (" ready.", 0.92, 1.58))
    h.insert(W((" your", 0.0, 0.42), (" order", 0.42, 0.68), (" is", 0.68, 0.92), (" ready", 0.92, 1.34),
               (" it", 1.34, 1.64), (" cost", 1.64, 1.96), (" dollar", 1.96, 2.2)))
    assert [w.text for w in h.tail] == ["it", "cost", "dollar"]


def test_a_word_said_twice_is_not_taken_for_the_stable_one():
    # "Yes. Yes, that is right.": the first "yes" is stable; the second starts 0.4 s after it
    # ends, and an n-gram overlap check dropped it as a repeat of the stable one
    h = committed((" yes,", 0.0, 0.88))
    h.insert(W((" Yes,", 0.0, 1.28), (" yes,", 1.28, 1.42), (" that", 1.42, 1.6), (" is", 1.6, 1.78)))
    assert [w.norm for w in h.tail] == ["yes", "that", "is"]
    # the second "yes" became stable at 0.86-1.00 s; the next decode puts it at 1.28-1.42 s
    # (its first "Yes," took in the pause): 0.28 s of drift next to a pause, still that "yes"
    h = committed((" Yes", 0.0, 0.64), (" yes", 0.86, 1.0))
    h.commit_all(W((" Yes,", 0.0, 1.28), (" yes,", 1.28, 1.42), (" that", 1.42, 1.6), (" is", 1.6, 1.78),
                   (" right.", 1.78, 1.96)))
    assert join_words(h.committed) == "Yes yes that is right."
    h = committed((" No,", 0.0, 0.4))
    h.commit_all(W((" No,", 0.0, 0.45), (" no.", 0.5, 0.9), (" I", 1.0, 1.1), (" said", 1.1, 1.4)))
    assert join_words(h.committed) == "No, no. I said"


def test_two_decodes_agreeing_on_an_unsure_word_do_not_make_it_stable():
    # espeak's "Please turn off the lights in the kitchen", decodes of the growing buffer (tiny.en,
    # one BLAS thread): "my life's" at p 0.58, then 0.51; a decode of the whole turn hears
    # "lights" (0.79). Committed, "life's" stayed in the final however the turn ended.
    def decode(*spec: tuple[str, float, float, float]) -> list[Word]:
        words: list[Word] = []
        for raw, start, end, p in spec:
            append_word(words, raw, start, end, p)
        return words

    first = decode((" Please", 0.0, 0.54, 0.70), (" turn", 0.54, 0.78, 0.99), (" my", 1.04, 1.22, 0.79),
                   (" life's", 1.22, 1.60, 0.58), (" invocation", 1.60, 1.94, 0.62))
    second = decode((" Please", 0.0, 0.56, 0.72), (" turn", 0.56, 0.78, 1.0), (" my", 1.04, 1.22, 0.82),
                    (" life's", 1.22, 1.62, 0.51), (" invocation", 1.62, 1.98, 0.39), (" and", 2.3, 2.48, 0.88))
    for min_p, stable in ((0.0, "Please turn my life's"), (0.6, "Please turn my")):
        h = HypothesisBuffer(min_probability=min_p)
        h.insert(first, horizon=1.9)
        h.insert(second, horizon=2.4)
        assert join_words(h.committed) == stable
    h.commit_all(decode((" Please", 0.0, 0.56, 0.75), (" turn", 0.56, 0.78, 0.99), (" my", 1.04, 1.22, 0.8),
                        (" lights", 1.22, 1.46, 0.79), (" in", 1.46, 1.68, 0.98), (" the", 1.68, 1.82, 0.9),
                        (" kitchen.", 1.82, 2.14, 1.0)))
    assert join_words(h.committed) == "Please turn my lights in the kitchen."
    with pytest.raises(ValueError):
        HypothesisBuffer(min_probability=1.0)


def test_a_stable_word_recognized_later_in_time_is_not_repeated():
    # alignments of two decodes disagree: " to" now starts after the stable end
    h = committed((" comes", 0.6, 0.92), (" to", 0.92, 1.14))
    h.insert(W((" comes", 0.62, 1.0), (" to", 1.1, 1.3), (" dollar", 1.3, 1.5)), from_s=0.0)
    assert [w.text for w in h.tail] == ["dollar"]


def test_stable_words_heard_differently_are_neither_repeated_nor_lose_what_follows():
    # stable "I send to"; the next decode hears "I am Tuesday," with " Tuesday," over " to"
    # (espeak speech): a cut by start time dropped " Tuesday,"
    h = committed((" I", 1.38, 1.7), (" send", 1.7, 1.96), (" to", 1.96, 2.3))
    h.commit_all(W((" I", 1.38, 1.7), (" am", 1.7, 1.98), (" Tuesday,", 1.98, 2.74), (" not", 2.74, 3.0),
                   (" Thursday.", 3.0, 3.66)), from_s=1.38)
    assert join_words(h.committed) == "I send to Tuesday, not Thursday."
    # stable "... to dollar"; the final decode writes the same audio as " $5" ".20,"
    h = committed((" comes", 2.2, 2.6), (" to", 2.6, 2.78), (" dollar", 2.78, 3.02))
    h.commit_all(W((" comes", 2.2, 2.6), (" to", 2.6, 2.78), (" $5", 2.78, 3.44), (".20,", 3.44, 4.98),
                   (" including", 4.98, 4.98), (" tax.", 4.98, 5.66)))
    assert join_words(h.committed) == "comes to dollar $5.20, including tax."
    # " Paris?" took in the pause after it: most of it is still the stable " pairs"
    h = committed((" like", 0.88, 1.08), (" in", 1.08, 1.3), (" pairs", 1.3, 1.64))
    h.commit_all(W((" like", 0.88, 1.08), (" in", 1.08, 1.32), (" Paris?", 1.32, 1.96), (" And", 1.96, 2.0),
                   (" in", 2.0, 2.18), (" London?", 2.18, 2.66)))
    assert join_words(h.committed) == "like in pairs And in London?"
    # the context before a flush cut, heard as a fragment of the stable words: dropped
    h = committed((" dollar", 1.14, 1.36), (" 5", 1.38, 1.78), (".20.", 1.78, 2.48))
    h.commit_all(W((" 20,", 1.72, 2.3), (" including", 2.9, 3.26), (" tax.", 3.26, 4.0)), from_s=1.72)
    assert join_words(h.committed) == "dollar 5.20. including tax."
    # a piece whose head re-hears a stable word continues that word
    h = committed((" dollar", 1.94, 2.2), (" nineteen", 2.2, 2.68), (" point", 2.7, 3.02))
    h.commit_all(W((" dollar", 1.94, 2.22), (" 19", 2.22, 2.7), (".99", 2.7, 3.38), (" and", 3.38, 3.7)))
    assert join_words(h.committed) == "dollar nineteen point.99 and"


def test_only_stable_words_inside_the_decoded_audio_are_aligned():
    # a decode from 5 s on cannot re-recognize a "no" that ended at 1 s
    h = committed((" no,", 0.5, 1.0), (" I", 1.2, 1.3), (" mean", 1.3, 4.8))
    h.commit_all(W((" no.", 5.1, 5.5)), from_s=5.0)
    assert join_words(h.committed) == "no, I mean no."


# -- a loop of the prompted decoder -----------------------------------------------------------
LOOP = W((" Including", 0.0, 0.54), (" tax.", 0.54, 0.82), (" Including", 0.82, 0.82), (" tax.", 0.82, 1.28))


def test_a_repeat_the_other_decode_does_not_hear_is_dropped():
    plain = W((" including", 0.0, 0.5), (" tax.", 0.5, 1.28))
    assert join_words(drop_unheard_repeat(LOOP, lambda: plain)) == "Including tax."
    three = LOOP + W((" Including", 1.28, 1.28), (" tax.", 1.28, 1.28))
    assert join_words(drop_unheard_repeat(three, lambda: plain)) == "Including tax."


def test_a_copy_aligned_to_no_audio_is_dropped_even_when_the_other_decode_loops_too():
    looped = W((" No...", 0.0, 0.78), (" No...", 0.78, 1.0), (" No...", 1.0, 1.0))
    assert join_words(drop_unheard_repeat(looped, lambda: looped)) == "No... No..."
    assert drop_unheard_repeat(looped[:2], lambda: looped[:2]) == looped[:2]  # both copies heard


def test_a_repeat_in_the_audio_is_kept():
    no_no = W((" No,", 0.0, 0.4), (" no.", 0.5, 0.9))
    assert drop_unheard_repeat(no_no, lambda: W((" no,", 0.0, 0.4), (" no.", 0.5, 0.9))) == no_no
    assert drop_unheard_repeat(LOOP, lambda: LOOP) == LOOP

    def never() -> list[Word]:
        raise AssertionError("no second decode without a repeat")

    heard = LOOP[:2] + W((" Including", 0.82, 1.1))
    assert drop_unheard_repeat(heard, never) == heard


def test_a_loop_past_the_end_of_the_audio_is_dropped_even_when_cut_short():
    # tiny.en, interim decode of "Hello? Hello, is anyone there?" (Piper): the question again
    # at the buffer's end, every word 0 s long, the last copy cut short
    said = W((" Hello?", 0.0, 1.08), (" Hello?", 1.08, 1.54), (" Is", 1.54, 1.54), (" anyone", 1.54, 1.84),
             (" there?", 1.84, 2.08))
    loop = W((" Hello?", 2.08, 2.08), (" Hello?", 2.08, 2.08), (" Is", 2.08, 2.08), (" anyone", 2.08, 2.08),
             (" there?", 2.08, 2.08), (" Hello?", 2.08, 2.08))
    assert drop_unheard_repeat(said + loop, None) == said
    # 0 s words past the end that say something new are kept (the next decode decides)
    new = said + W((" Bob?", 2.08, 2.08))
    assert drop_unheard_repeat(new, None) == new


# -- the whole utterance with a scripted decoder ----------------------------------------------
def _space(piece: str) -> str:
    """Whisper writes a piece that continues a word ($5 + .20) without a leading space."""
    return "" if piece[:1] in (".", ",") else " "


class ScriptedWhisper(WhisperDecoder):
    """Hears the scripted words (text, start, end in buffer time) whose middle lies in the
    audio it gets; the buffer is a ramp (each sample's value is its time / `scale`), so a
    decode knows where it starts. `loop`: prompted, on under 2 s, it says its last two words
    again with no time of their own, as tiny.en did. `unstable`: two decodes in a row never
    agree. `partial`: what it hears of a word the audio ends inside ("tablespoons" cut after
    "table" -> "tables."). `delay_s`: each decode takes this long; `log` records (start, end)
    wall times of each decode, for the flush tests (decodes may run on two threads).
    `draft`: a greedy draft runs beside each decode that asks for one (`on_draft`), hearing a
    word differently where the dict says so, in `draft_s`; the beam's words take `text_s`."""

    def __init__(self, spoken: list[tuple[str, float, float]], loop: bool = False, unstable: bool = False,
                 partial: dict[str, str] | None = None, delay_s: float | list[float] = 0.0, scale: float = 1.0,
                 align_s: float = 0.0, draft: dict[str, str] | None = None, draft_s: float = 0.0,
                 text_s: float = 0.0) -> None:
        self.config = TranscriberConfig()
        self.spoken, self.loop, self.unstable = spoken, loop, unstable
        self.partial, self.delay_s, self.scale = partial or {}, delay_s, scale
        self.align_s = align_s  # the word alignment's time, after the words went to `on_text`
        self.draft, self.draft_s, self.text_s = draft, draft_s, text_s
        if draft is not None:
            self._drafts = ThreadPoolExecutor(1)
        self.early = 0  # decodes that gave their words before their alignment
        self.calls = 0
        self.cuts = 0  # decodes that heard a word cut short
        self.started = 0  # decodes begun
        self.log: list[tuple[float, float]] = []
        self._lock = threading.Lock()

    def decode(self, audio: np.ndarray, prompt: str = "", beam_size: int | None = None, **kw):
        t0 = time.perf_counter()
        with self._lock:
            self.started += 1
            k = self.started - 1
        # a list: the k-th decode's delay (the last one for the rest)
        time.sleep(self.delay_s[min(k, len(self.delay_s) - 1)] if isinstance(self.delay_s, list) else self.delay_s)
        out = super().decode(audio, prompt, beam_size, **kw)
        with self._lock:
            self.log.append((t0, time.perf_counter()))
        return out

    def _encode(self, audio: np.ndarray) -> tuple[float, int]:
        return float(audio[0]) * self.scale, 0

    def _words(self, encoded: tuple[float, int], prompt: str, beam_size: int | None, end_s: float,
               cancelled=None, on_text=None) -> list[Word]:
        t0, _ = encoded
        with self._lock:
            self.calls += 1
            calls = self.calls
        suffix = "ab"[calls % 2] if self.unstable else ""
        end = t0 + end_s
        spec = []
        for t, s, e in self.spoken:
            if (s + e) / 2 < t0:
                continue
            if t in self.partial and s + 0.1 < end < e:  # the audio ends inside the word
                spec.append((_space(t) + self.partial[t], s - t0, end - t0))
                self.cuts += 1
            elif (s + e) / 2 <= end:
                spec.append((_space(t) + t + suffix, s - t0, e - t0))
        words = W(*spec)
        if self.loop and prompt and end_s < 2.0 and len(words) >= 2:
            words += [Word(w.text, end_s, end_s) for w in words[-2:]]
        time.sleep(self.text_s)
        if on_text is not None and repeat_free(words):  # as WhisperDecoder._words does
            self.early += 1
            on_text([Word(w.text, end_s, end_s, 1.0, w.attached) for w in words])
        time.sleep(self.align_s)
        return words


    def _generate(self, enc: float, prompt: str, beam_size: int) -> list[tuple[str, float, float]]:
        """The draft's generate (the beam's is in `_words`): the words after the audio's start."""
        time.sleep(self.draft_s)
        return [(self.draft.get(t, t), s - enc, e - enc) for t, s, e in self.spoken if (s + e) / 2 >= enc]

    def _unaligned(self, tokens: list[tuple[str, float, float]], end_s: float) -> list[Word]:
        return W(*[(_space(t) + t, end_s, end_s) for t, s, e in tokens if (s + e) / 2 <= end_s])


class OpenGate:
    """Keeps all audio; the test says when speech pauses."""

    pending_samples = 0
    kept_speech_upto = -1
    speech_seen = True

    def new_turn(self) -> None:
        self.in_speech, self.silence_s = True, 0.0

    def feed(self, samples: np.ndarray, probs=None) -> list[np.ndarray]:
        self.kept_speech_upto = len(samples)
        return [samples]


def run_utterance(decoder: ScriptedWhisper, end_s: float, pauses: tuple[float, ...] = (),
                  step_s: float = 0.5, **config) -> tuple[Utterance, list, object]:
    """Push a ramp in `step_s` chunks, decoding when due; at each pause time the gate reports
    0.3 s of silence for one step. Returns (utterance, events, final)."""
    gate = OpenGate()
    utt = Utterance(TranscriberConfig(**config), decoder, gate)
    ramp = np.arange(round(end_s * SAMPLE_RATE), dtype=np.float32) / SAMPLE_RATE
    events, edges = [], sorted({*np.arange(step_s, end_s, step_s).round(3), *pauses, end_s})
    prev = 0.0
    for t in edges:
        utt.ingest(ramp[round(prev * SAMPLE_RATE):round(t * SAMPLE_RATE)], prev, 0.0)
        gate.in_speech, gate.silence_s = (False, 0.3) if t in pauses else (True, 0.0)
        while (e := utt.step()) is not None:
            events.append(e)
        prev = t
    return utt, events, utt.finish(0.0)


TOTAL = [("The", 0.0, 0.38), ("total", 0.38, 0.6), ("comes", 0.6, 0.92), ("to", 0.92, 1.14),
         ("five", 1.14, 1.5), ("dollars.", 1.5, 2.2)]


# restart_at_pause: the run after the pause is decoded alone, prompted with the stable text
@pytest.mark.parametrize("restart", [False, True])
def test_short_run_after_a_pause_ends_once_in_the_final(restart):
    decoder = ScriptedWhisper([*TOTAL, ("Including", 2.9, 3.3), ("tax.", 3.3, 3.6)], loop=True)
    _, events, final = run_utterance(decoder, 4.03, pauses=(2.72,), restart_at_pause=restart)
    assert "preflight" in [e.kind for e in events]
    assert final.text == "The total comes to five dollars. Including tax."
    assert [round(w.start, 2) for w in final.words][-2:] == [2.9, 3.3]  # stream time kept


@pytest.mark.parametrize("restart", [False, True])
def test_a_phrase_really_said_twice_after_a_pause_stays_twice(restart):
    spoken = [*TOTAL, ("Including", 2.9, 3.3), ("tax.", 3.3, 3.6), ("Including", 3.7, 4.1), ("tax.", 4.1, 4.4)]
    _, _, final = run_utterance(ScriptedWhisper(spoken, loop=True), 4.8, pauses=(2.72,), restart_at_pause=restart)
    assert final.text == "The total comes to five dollars. Including tax. Including tax."


def test_forced_cut_of_a_long_unstable_buffer_keeps_every_word_once():
    # nothing agrees for 27 s, so the older half is made stable; 0.26 s words put the cut
    # (13.5 s) past the middle of word 51 (13.26-13.52 s), which a decode from there misses
    spoken = [(f"w{i}", 0.26 * i, 0.26 * (i + 1)) for i in range(int(40 / 0.26))]
    utt, _, final = run_utterance(ScriptedWhisper(spoken, unstable=True), 40.0)
    assert utt.hyp.stable_end > 13  # the forced cut happened
    assert [int(w.norm[1:-1]) for w in final.words] == list(range(len(spoken)))


@pytest.mark.parametrize("after_s, from_stable", [(None, False), (10.0, False), (4.0, True)])
def test_a_pause_decode_in_a_long_buffer_starts_at_the_stable_words(after_s, from_stable):
    spoken = [(f"w{i}", 0.4 * i, 0.4 * (i + 1)) for i in range(20)]  # 8 s of speech, then a pause
    decoder = ScriptedWhisper(spoken)
    starts = []
    encode = decoder._encode
    decoder._encode = lambda audio: starts.append(float(audio[0])) or encode(audio)
    _, events, final = run_utterance(decoder, 8.0, pauses=(8.0,), pause_from_stable_after_s=after_s)
    assert events[-1].kind == "preflight" and final.decode_s == 0.0  # the pause decode was the final
    # the whole buffer, or from 1 s (cut_context_s) before the first unstable word
    assert (starts[-1] > 5.0) if from_stable else starts[-1] == 0.0
    assert [w.norm for w in final.words] == [f"w{i}" for i in range(20)]  # every word once either way


def test_punctuation_at_a_pause_waits_for_the_next_words():
    # a ~100 ms pause inside a sentence: "sugar." then "for the cake." reads "sugar for the cake."
    h = HypothesisBuffer()
    h.commit_all(W((" I", 0.0, 0.2), (" need", 0.2, 0.5), (" sugar.", 0.5, 1.0)), hold_end=True)
    assert join_words(h.committed) == "I need sugar"
    h.commit_all(W((" I", 0.0, 0.2), (" need", 0.2, 0.5), (" sugar", 0.5, 1.0), (" for", 1.2, 1.4),
                   (" the", 1.4, 1.5), (" cake.", 1.5, 2.0)), hold_end=True)
    h.release()  # the flush: nothing followed
    assert join_words(h.committed) == "I need sugar for the cake."
    # a new sentence after the pause keeps it; the stable text only grew
    h = HypothesisBuffer()
    h.commit_all(W((" Book", 0.0, 0.3), (" it.", 0.3, 0.6)), hold_end=True)
    before = join_words(h.committed)
    h.commit(W((" At", 1.0, 1.2), (" eight", 1.2, 1.5)))
    assert join_words(h.committed) == "Book it. At eight" and join_words(h.committed).startswith(before)
