"""The phonemes Piper is given: from espeak-ng without its bridge's leak, and long sentences in
pieces the onnxruntime arena is sized for.

piper-tts 1.8's C bridge (`piper.espeakbridge.get_phonemes`) appends each clause's tuple to the
list it returns without releasing its own reference (`PyList_Append(list, Py_BuildValue(...))`),
so every clause Piper ever reads leaks a tuple and its phoneme string for the process's life:
2 objects, ~250 bytes a clause; in a real soak 86 KB over 40 turns, the largest unbounded item
tracemalloc found. Here the same espeak-ng entry point is called through ctypes on the library
piper has already loaded (same espeak-ng state, same lock), and piper's own post-processing is
applied to what it returns: language-switch flags dropped, the clause's punctuation kept, NFD
code points, known vowel clusters merged. Output is identical (tests/test_tts_piper_phonemes.py
compares them); a text with piper's inline [[ phonemes ]] or another phoneme type takes piper's
own path. espeak-ng itself leaks ~1.5 KB in every voice change, and piper changes the voice
before every text it reads: here the voice is set only when espeak-ng's is not the one wanted.

A sentence longer than `max_phonemes` is read in pieces, cut after its last clause mark or word
that fits: onnxruntime's arena grows to the largest input it has run and keeps that size
(tts.piper_voice.ArenaBoundedSession), so bounding the input bounds the arena, and the voice
warms it to that bound at load rather than in the middle of a conversation.
"""

from __future__ import annotations

import ctypes
import re
import unicodedata
from dataclasses import dataclass, field

from piper import PiperVoice
from piper import voice as piper_voice
from piper.config import PhonemeType
from piper.phonemize_espeak import EspeakPhonemizer, _merge_known_vowel_clusters

_FLAGS = re.compile(r"\([^)]+\)")  # "(en)" ... "(fr)" around words of another language
_SENTENCE = 0x00080000  # espeak-ng's CLAUSE_TYPE_SENTENCE
# espeak-ng clause codes (pause | intonation | type) -> the punctuation piper keeps
_TERMINATORS = {40 | 0x0000 | _SENTENCE: ".", 40 | 0x2000 | _SENTENCE: "?", 45 | 0x3000 | _SENTENCE: "!",
                20 | 0x1000 | 0x40000: ",", 30 | 0x0000 | 0x40000: ":", 30 | 0x1000 | 0x40000: ";"}
_CHARS_AUTO, _PHONEMES_IPA = 0, 0x02


class _EspeakVoice(ctypes.Structure):
    """espeak-ng's espeak_VOICE (speak_lib.h)."""

    _fields_ = [("name", ctypes.c_char_p), ("languages", ctypes.c_char_p), ("identifier", ctypes.c_char_p),
                ("gender", ctypes.c_ubyte), ("age", ctypes.c_ubyte), ("variant", ctypes.c_ubyte),
                ("xx1", ctypes.c_ubyte), ("score", ctypes.c_int), ("spare", ctypes.c_void_p)]


class EspeakClauses:
    """text -> [(IPA phonemes, terminator, ends a sentence)] per clause, as the bridge's
    get_phonemes returns them, from `espeak_TextToPhonemesWithTerminator`."""

    def __init__(self) -> None:
        from piper import espeakbridge

        lib = ctypes.CDLL(espeakbridge.__file__)
        fn = lib.espeak_TextToPhonemesWithTerminator  # AttributeError: absent
        fn.restype = ctypes.c_char_p
        fn.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
        self._fn = fn
        self._get_voice = lib.espeak_GetCurrentVoice
        self._get_voice.restype = ctypes.POINTER(_EspeakVoice)
        self._get_voice.argtypes = []
        self._set_voice = espeakbridge.set_voice  # returns None: nothing to leak
        self._voice: tuple | None = None  # (name, espeak-ng's voice right after we set it)

    def set_voice(self, name: str) -> None:
        """espeak-ng's voice `name`, set only when espeak-ng's current voice is not the one
        this object last set for `name`: every espeak_SetVoiceByName leaks ~1.5 KB inside
        espeak-ng (2,000 calls: +2.9 MB of heap, never freed), and piper sets the voice before
        every text it reads. espeak-ng's voice is process-wide state, so it is read back, not
        remembered: another voice set in between (piper's own path, another voice object) is
        seen, and `name` set again. The caller holds piper's espeak-ng lock."""
        if self._voice is not None and self._voice == (name, self._current_voice()):
            return
        self._set_voice(name)
        self._voice = (name, self._current_voice())

    def _current_voice(self) -> tuple | None:
        ptr = self._get_voice()
        if not ptr:
            return None
        v = ptr.contents
        return v.name, v.languages, v.identifier, v.gender, v.age, v.variant

    def __call__(self, text: str) -> list[tuple[str, str, bool]]:
        # the bytes' own NUL-terminated buffer, which espeak-ng only reads: create_string_buffer
        # made a c_char array class for each new length, cyclic garbage once dropped (~3 a turn)
        text_p = ctypes.c_char_p(text.replace("\x00", " ").encode("utf-8"))
        ptr = ctypes.cast(text_p, ctypes.c_void_p)  # espeak-ng advances it; NULL after the last clause
        code = ctypes.c_int(0)
        clauses = []
        while ptr.value is not None:
            phonemes = self._fn(ctypes.byref(ptr), _CHARS_AUTO, _PHONEMES_IPA, ctypes.byref(code))
            c = code.value & 0x000FFFFF
            clauses.append(((phonemes or b"").decode("utf-8", "replace"), _TERMINATORS.get(c, ""),
                            c & _SENTENCE == _SENTENCE))
        return clauses


def espeak_phonemize(clauses: EspeakClauses, voice: str, text: str,
                     vowel_clusters=None) -> list[list[str]]:
    """piper's EspeakPhonemizer.phonemize over `clauses`: phonemes grouped by sentence. The
    caller holds piper's espeak-ng lock."""
    def merged(phonemes: list[str]) -> list[str]:
        return _merge_known_vowel_clusters(phonemes, vowel_clusters) if vowel_clusters else phonemes

    clauses.set_voice(voice)
    sentences: list[list[str]] = []
    current: list[str] = []
    for phonemes, terminator, ends_sentence in clauses(text):
        phonemes = _FLAGS.sub("", phonemes) + terminator
        if terminator in (",", ":", ";"):  # not a sentence boundary
            phonemes += " "
        current.extend(unicodedata.normalize("NFD", phonemes))
        if ends_sentence:
            sentences.append(merged(current))
            current = []
    if current:  # text without a final sentence terminator
        sentences.append(merged(current))
    return sentences


def espeak_clauses() -> EspeakClauses | None:
    """An EspeakClauses, or None when piper's bridge exports no espeak-ng entry point."""
    try:
        return EspeakClauses()
    except (OSError, AttributeError):
        return None


def split_sentence(phonemes: list[str], max_phonemes: int) -> list[list[str]]:
    """A sentence's phonemes in pieces of at most `max_phonemes`, each cut at a word boundary
    (the space dropped): after the last clause mark (", " ...) in the second half of the piece,
    else at its last space. A stretch with no space in it stays whole."""
    pieces: list[list[str]] = []
    rest = phonemes
    while len(rest) > max_phonemes:
        spaces = [i for i in range(1, max_phonemes + 1) if rest[i] == " "]
        if not spaces:
            break
        clauses = [i for i in spaces if rest[i - 1] in ",;:" and i >= max_phonemes // 2]
        cut = (clauses or spaces)[-1]
        pieces.append(rest[:cut])
        rest = rest[cut + 1:]
    pieces.append(rest)
    return pieces


@dataclass
class ParleyPiperVoice(PiperVoice):
    """PiperVoice whose espeak-ng phonemes come through `clauses` (None: piper's own path, leak
    and all), its sentences in pieces of at most `max_phonemes` (0: whole)."""

    clauses: EspeakClauses | None = field(default_factory=espeak_clauses)
    max_phonemes: int = 0

    def phonemize(self, text: str) -> list[list[str]]:
        if (self.clauses is None or self.config.phoneme_type != PhonemeType.ESPEAK or "[[" in text
                or self.config.espeak_voice == "ar"):
            sentences = super().phonemize(text)
        else:
            with piper_voice._ESPEAK_PHONEMIZER_LOCK:  # espeak-ng is one process-wide state
                if piper_voice._ESPEAK_PHONEMIZER is None:  # piper's one-time espeak-ng initialisation
                    piper_voice._ESPEAK_PHONEMIZER = EspeakPhonemizer(self.espeak_data_dir)
                sentences = espeak_phonemize(self.clauses, self.config.espeak_voice, text,
                                             self.config.vowel_clusters)
            if sentences and not sentences[-1]:
                sentences.pop()
        if self.max_phonemes <= 0:
            return sentences
        return [piece for s in sentences for piece in split_sentence(s, self.max_phonemes)]
