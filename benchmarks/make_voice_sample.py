"""Write the bundled sample conversation for `parley bench voice` (and `make demo`):

    python -m benchmarks.make_voice_sample [--conversation sample|second|answers|long] [--out DIR]

Five short requests a voice assistant gets, each by another voice: the embedded Piper voice
(joe) at two speaking rates, an espeak-ng variant and two Debian flite voices (slt, rms), so
the sample is not joe alone. None of the sentences is in the turn detector's training,
validation or test sentences, and the espeak variant is one of its held-out test voices.
Turn 3 has a 0.8 s pause mid-sentence, where the speaker looks for a word ("What will the
weather be like in ... Chicago on Saturday?"): an agent that answers there answers half a
sentence. The voice is given a comma at that point (`spoken`), where Piper pauses with a
continuing intonation; that pause is stretched to PAUSE_S. (A pause after a clause that is a
whole question by itself, "How long does it take to drive to the airport, ... if I leave at
five?", was tried first: our end-of-turn detector answered there, as a person might; such a
turn tests a guess, not whether the agent waits for an unfinished sentence.)

A second conversation (`--conversation second`, benchmarks/data/voice_sample_2) was written
after every choice in the session was made, to check its figures on sentences and voices
nothing was tuned on: two other flite voices (awb, kal), two other espeak-ng variants, Piper's
joe at another rate, and a pause after a clause that is a whole command by itself ("Play some relaxing piano music, ...
in the kitchen."), the guess the first conversation avoids.

Format (`parley bench turn`'s): NAME.wav, 16 kHz mono 16-bit + NAME.json {"text", "kind",
"speech", "pauses", "turn_end", "voice"}, times in seconds, from the audio's energy
(turn_detection.training.data.speech_intervals)."""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from parley.audio import ENGINE_RATE, resample
from parley.errors import ModelNotFoundError
from parley.wav import read_wav, write_wav
from turn_detection.training.data import speech_intervals

LEAD_S, TAIL_S, PAUSE_S = 0.5, 1.5, 0.8
DEFAULT_OUT = Path(__file__).parent / "data" / "voice_sample"
SECOND_OUT = Path(__file__).parent / "data" / "voice_sample_2"


@dataclass(frozen=True)
class Line:
    name: str
    text: str
    engine: str  # "piper" | "espeak" | "flite"
    voice: str  # Piper: "joe"; espeak-ng / flite voice name
    rate: float  # Piper length_scale, espeak words per minute; unused for flite
    spoken: str | None = None  # what the voice is given, when not `text` (a comma where it pauses)

    @property
    def paused(self) -> bool:
        return self.spoken is not None


CONVERSATION: tuple[Line, ...] = (
    Line("01-calendar", "What's on my calendar for Thursday afternoon?", "piper", "joe", 1.0),
    Line("02-lights", "Turn the living room lights down to thirty percent.", "flite", "slt", 0),
    Line("03-weather-paused", "What will the weather be like in Chicago on Saturday?", "piper", "joe", 1.15,
         spoken="What will the weather be like in, Chicago on Saturday?"),
    Line("04-capital", "What is the capital of Australia?", "espeak", "en-us+f3", 165),
    Line("05-message", "Text Maria that I'm running ten minutes late.", "flite", "rms", 0),
)
SECOND: tuple[Line, ...] = (
    Line("01-alarm", "Set an alarm for six thirty tomorrow morning.", "flite", "awb", 0),
    Line("02-recipe", "How long should I boil an egg for a soft yolk?", "espeak", "en-gb", 175),
    Line("03-music-paused", "Play some relaxing piano music in the kitchen.", "piper", "joe", 1.1,
         spoken="Play some relaxing piano music, in the kitchen."),
    Line("04-distance", "How far is the moon from the earth?", "flite", "kal", 0),
    Line("05-reminder", "Remind me to call the dentist on Monday.", "espeak", "en-us+m3", 150),
)
# A conversation of short answers (`--conversation answers`, benchmarks/data/voice_answers): a
# request, then the turns a user gives once the agent has spoken. None of them is in the
# text probe's answers (turn_detection/training/requests/answers.txt).
ANSWERS: tuple[Line, ...] = (
    Line("01-table", "Can you find me a table for two at eight tonight?", "piper", "joe", 1.0),
    Line("02-sure", "Sure, why not.", "flite", "slt", 0),
    Line("03-thanks", "Thanks so much.", "espeak", "en-us+f3", 165),
    Line("04-tomorrow", "And how about tomorrow evening?", "piper", "joe", 1.15),
    Line("05-done", "No, that's everything.", "flite", "rms", 0),
    Line("06-okay", "Okay, sounds great.", "espeak", "en-gb", 175),
)
ANSWERS_OUT = Path(__file__).parent / "data" / "voice_answers"
# Long turns (`--conversation long`, benchmarks/data/voice_long): two or three sentences at a
# time (8 and 12 s of speech), where the STT's decode at the pause is the slow part.
LONG: tuple[Line, ...] = (
    Line("01-trip", "I'm planning a trip to Portugal in the spring with two friends, and we want to see Lisbon and "
         "Porto. Could you suggest how many days we should spend in each city?", "piper", "joe", 1.0),
    Line("02-yes", "Yes, that sounds lovely.", "espeak", "en-us+m3", 160),
    Line("03-weather", "Also, what kind of weather should we expect there in April, and do we need rain jackets?",
         "flite", "slt", 0),
    Line("04-volcano", "My daughter has a school project about volcanoes due next Friday, and she needs to explain "
         "why some volcanoes explode while others just have lava flowing slowly. How would you explain that to "
         "a ten year old?", "espeak", "en-gb", 170),
)
LONG_OUT = Path(__file__).parent / "data" / "voice_long"
CONVERSATIONS = {"sample": (CONVERSATION, DEFAULT_OUT), "second": (SECOND, SECOND_OUT), "answers": (ANSWERS, ANSWERS_OUT),
                 "long": (LONG, LONG_OUT)}


def _flite(text: str, voice: str) -> tuple[np.ndarray, int]:
    binary = shutil.which("flite")
    if binary is None:
        raise ModelNotFoundError("flite", "the flite binary is not on PATH", "apt-get install flite")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.wav"
        subprocess.run([binary, "-voice", voice, "-t", text, "-o", str(out)], check=True, capture_output=True,
                       timeout=60)
        return read_wav(out)


def synthesize(line: Line) -> np.ndarray:
    """[N] float32 at 16 kHz, leading and trailing silence trimmed."""
    text = line.spoken or line.text
    if line.engine == "piper":
        from tts import PiperOptions, PiperSynthesizer

        syn = PiperSynthesizer.default(options=PiperOptions(length_scale=line.rate, noise_scale=0.0,
                                                            noise_w_scale=0.0))
        out = syn.synthesize(text)
        audio, rate = out.audio, out.sample_rate
    elif line.engine == "espeak":
        from tts import EspeakSynthesizer

        out = EspeakSynthesizer(line.voice, int(line.rate)).synthesize(text)
        audio, rate = out.audio, out.sample_rate
    else:
        audio, rate = _flite(text, line.voice)
    audio = resample(audio, rate, ENGINE_RATE)
    iv = speech_intervals(audio)
    return audio[round(iv[0][0] * ENGINE_RATE) : round(iv[-1][1] * ENGINE_RATE)]


def stretch_pause(speech: np.ndarray, text: str) -> tuple[np.ndarray, float]:
    """Widen the silence at the comma to PAUSE_S -> (audio, pause start in s): the longest gap
    between speech runs (Piper's comma pause measured 0.28 s; the other gaps, stop closures
    inside words, 0.05-0.06 s; picking the gap nearest the comma's share of the characters
    landed inside "Chicago")."""
    iv = speech_intervals(speech, gap_s=0.05)
    gaps = [(a[1], b[0]) for a, b in itertools.pairwise(iv)]
    if "," not in text or not gaps:
        raise ValueError(f"no pause found in the synthesized {text!r}")
    start, end = max(gaps, key=lambda g: g[1] - g[0])
    if end - start < 0.15:
        raise ValueError(f"the longest gap in {text!r} is {end - start:.2f} s: no comma pause")
    i, j = round(start * ENGINE_RATE), round(end * ENGINE_RATE)
    gap = np.zeros(round(PAUSE_S * ENGINE_RATE), dtype=np.float32)
    return np.concatenate([speech[:i], gap, speech[j:]]), start


def make_clip(line: Line) -> tuple[np.ndarray, dict]:
    speech = synthesize(line)
    pauses = []
    if line.paused:
        speech, start = stretch_pause(speech, line.spoken)
        pauses.append([round(float(LEAD_S + start), 3), round(float(LEAD_S + start + PAUSE_S), 3)])
    z = lambda s: np.zeros(round(s * ENGINE_RATE), dtype=np.float32)  # noqa: E731
    audio = np.concatenate([z(LEAD_S), speech, z(TAIL_S)])
    iv = [[round(s, 3), round(e, 3)] for s, e in speech_intervals(audio, gap_s=0.3)]
    voice = f"{line.engine}-{line.voice}" + (f"-{line.rate:g}" if line.engine != "flite" else "")
    return audio, {"text": line.text, "kind": "paused" if line.paused else "complete", "speech": iv,
                   "pauses": pauses, "turn_end": iv[-1][1], "voice": voice}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--conversation", choices=sorted(CONVERSATIONS), default="sample")
    ap.add_argument("--out", type=Path, default=None, help="default: the conversation's bundled directory")
    args = ap.parse_args(argv)
    lines, out = CONVERSATIONS[args.conversation]
    out = args.out or out
    out.mkdir(parents=True, exist_ok=True)
    for line in lines:
        audio, meta = make_clip(line)
        write_wav(out / f"{line.name}.wav", audio, ENGINE_RATE)
        (out / f"{line.name}.json").write_text(json.dumps(meta) + "\n")
        print(f"{line.name}: {len(audio) / ENGINE_RATE:.2f} s, turn_end {meta['turn_end']:.2f} s, "
              f"pauses {meta['pauses']}, {meta['voice']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
