"""Self-generated end-of-turn data: synthesized sentences (Piper, espeak-ng voices at
several rates), complete and cut mid-sentence at a word boundary of the SAME audio, so the
cut keeps its natural non-final prosody. Voices and sentences are split train / held out."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from parley.audio import ENGINE_RATE, resample

SENTENCES: tuple[str, ...] = (
    "I would like to book a table for two people tonight.",
    "Can you tell me what the weather will be like tomorrow morning?",
    "My flight to Chicago was cancelled and I need another one.",
    "Please remind me to call my sister when I get home from work.",
    "What time does the pharmacy on the corner close on Sundays?",
    "I think the package was delivered to the wrong address yesterday.",
    "Could you play some quiet music while I finish this report?",
    "We are planning a trip to the mountains at the end of the month.",
    "How many tablespoons of sugar should I put in the cake batter?",
    "The meeting with the design team has been moved to Thursday afternoon.",
    "I need to change the password for my email account right away.",
    "Is there a good Italian restaurant somewhere near the train station?",
    "Send a message to David saying that I will be about ten minutes late.",
    "My daughter wants to learn how to play the piano this summer.",
    "Which bus should I take to get to the museum from the hotel?",
    "The heating in my apartment stopped working in the middle of the night.",
    "Can you add milk, eggs and a loaf of bread to my shopping list?",
    "I was wondering if you could help me write a short thank you note.",
    "Turn off the lights in the living room and lock the front door.",
    "What is the fastest way to get from the airport to the city center?",
    "I have been feeling tired all week and I do not really know why.",
    "Tell me a little bit about the history of the old castle on the hill.",
    "Our neighbors are having a party on Saturday and we were invited.",
    "How long does it take to boil an egg so that the yolk stays soft?",
    "I left my umbrella on the bus this morning on the way to the office.",
    "Could you find me a recipe for a vegetable soup without any onions?",
    "The new phone I ordered last week still has not arrived at my house.",
    "Set an alarm for six thirty tomorrow because I have an early train.",
    "Do you know whether the library is open late on Wednesday evenings?",
    "I would rather stay at home tonight and watch a movie with my family.",
    "Please read me the latest news about the football match from last night.",
    "My car makes a strange noise every time I turn the steering wheel left.",
    "Can you explain the difference between a virus and a bacterial infection?",
    "We should probably leave early if we want to find a parking space downtown.",
    "I forgot to water the plants before I left for the weekend with my friends.",
    "What would be a nice present for my father who likes gardening and books?",
    "The printer in the office keeps jamming whenever I try to print in color.",
    "Let me know when the laundry is done so that I can hang it outside.",
    "How much would it cost to ship a small box of books to my cousin in Canada?",
    "I am looking for a quiet place to study where I will not be disturbed.",
)
HELD_OUT_SENTENCES = frozenset(range(3, len(SENTENCES), 4))  # every 4th sentence


@dataclass(frozen=True)
class Voice:
    engine: str  # "piper" | "espeak"
    name: str  # espeak voice, or "joe" for the embedded Piper voice
    rate: float  # Piper length_scale, or espeak words per minute

    @property
    def label(self) -> str:
        return f"{self.engine}-{self.name}-{self.rate:g}".replace("+", "_")


TRAIN_VOICES: tuple[Voice, ...] = (
    Voice("piper", "joe", 0.85), Voice("piper", "joe", 1.1),
    Voice("espeak", "en-us", 150), Voice("espeak", "en-us", 195), Voice("espeak", "en-gb", 170),
    Voice("espeak", "en-us+m3", 170), Voice("espeak", "en-gb-x-rp", 160), Voice("espeak", "en-us+f2", 180),
)
HELD_OUT_VOICES: tuple[Voice, ...] = (
    Voice("piper", "joe", 1.0), Voice("piper", "joe", 1.25),
    Voice("espeak", "en-us+f3", 165), Voice("espeak", "en-gb-scotland", 175), Voice("espeak", "en-029", 185),
)


def split(held_out: bool) -> tuple[list[str], tuple[Voice, ...]]:
    sents = [s for i, s in enumerate(SENTENCES) if (i in HELD_OUT_SENTENCES) == held_out]
    return sents, HELD_OUT_VOICES if held_out else TRAIN_VOICES


@functools.lru_cache(maxsize=1)
def _piper():
    from tts.piper_voice import PiperVoiceModel

    return PiperVoiceModel.default()


def synthesize(voice: Voice, text: str) -> np.ndarray:
    """[N] float32 at 16 kHz, leading/trailing silence trimmed."""
    if voice.engine == "piper":
        from tts.piper_voice import PiperOptions

        v = _piper()
        audio = resample(v.synthesize(text, PiperOptions(length_scale=voice.rate, noise_scale=0.0,
                                                         noise_w_scale=0.0)), v.sample_rate, ENGINE_RATE)
    else:
        from tts import EspeakSynthesizer

        out = EspeakSynthesizer(voice.name, int(voice.rate)).synthesize(text, normalize=False)
        audio = resample(out.audio, out.sample_rate, ENGINE_RATE)
    iv = speech_intervals(audio)
    return audio[int(iv[0][0] * ENGINE_RATE) : int(iv[-1][1] * ENGINE_RATE)] if iv else audio


def _envelope_db(audio: np.ndarray, hop: int = 160) -> np.ndarray:
    n = len(audio) // hop
    e = (audio[: n * hop].reshape(n, hop) ** 2).mean(axis=1)  # [n] 10 ms frames
    return 10 * np.log10(e + 1e-10)


def speech_intervals(audio: np.ndarray, gap_s: float = 0.15) -> list[tuple[float, float]]:
    """Clean synthesized audio -> [(start_s, end_s)] where the 10 ms energy is within 45 dB
    of the peak; gaps shorter than gap_s are bridged."""
    db = _envelope_db(audio)
    if len(db) == 0:
        return []
    on = np.flatnonzero(db > db.max() - 45.0)
    if len(on) == 0:
        return []
    out, start, prev = [], on[0], on[0]
    for i in on[1:]:
        if (i - prev) * 0.01 > gap_s:
            out.append((start * 0.01, (prev + 1) * 0.01))
            start = i
        prev = i
    out.append((start * 0.01, (prev + 1) * 0.01))
    return out


def find_cut(audio: np.ndarray, rng: np.random.Generator) -> int:
    """Sample index of a word boundary between 25% and 80% of the utterance: a random one of
    the energy dips (>= 20 ms at 25 dB below the speech median), else the deepest point."""
    db = _envelope_db(audio)
    lo, hi = int(0.25 * len(db)), int(0.8 * len(db))
    med = float(np.median(db[db > db.max() - 45.0]))
    low = db[lo:hi] < med - 25.0
    starts = [lo + i for i in range(1, len(low) - 1) if low[i] and low[i + 1] and not low[i - 1]]
    if starts:
        return int(rng.choice(starts)) * 160
    return (lo + int(np.argmin(db[lo:hi]))) * 160
