"""The embedded Piper voice (VITS ONNX) behind a small, thread-budgeted loader.

piper-tts is GPL-3.0 (it bundles espeak-ng's data for phonemization): see the README's
licence note. We build the onnxruntime session ourselves to set its thread budget: the
session's default (all cores) stalls STT and the LLM that run beside it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from parley.assets import get_model
from parley.errors import ModelCorruptError, ModelNotFoundError


@dataclass(frozen=True)
class PiperOptions:
    length_scale: float | None = None  # > 1 slower speech
    noise_scale: float | None = None
    noise_w_scale: float | None = None
    speaker_id: int | None = None


MAX_IDS = 250  # phoneme ids Piper runs at once (~115 characters, ~20 words): the arena is sized for this, at load
# The warm-up reads MAX_IDS ids at half speed. What the decoder holds grows with the audio's
# length, and at normal speed the warm-up made 132k samples while real pieces reach ~172k (commas
# add pauses): on one CI machine that left the arena at 218 MB and a long sentence stepped it to
# 350. At 2.0 it makes ~228k samples; here the heap is 351 MB either way, resident memory after
# 9 long sentences 360 MB against 336.
WARM_LENGTH_SCALE = 2.0
# words the warm-up reads, cut to MAX_IDS ids
_WARM_TEXT = ("the weather today is sunny and warm with a light breeze from the west and tomorrow looks "
              "much the same with clear skies over the whole region from morning until late in the evening")


class ArenaBoundedSession:
    """The onnxruntime session Piper runs, giving back what an over-long input adds to the arena.

    onnxruntime's CPU arena grows (doubling) to fit the largest input it has seen and never
    shrinks. Measured (jemalloc's heap in use, one process): after sentences of up to 21 words
    221 MB, then one of 28 words 353 MB, 56 words 618 MB, 112 words 1145 MB, kept for the
    process's life; a 200-turn soak jumped +397 MB once the LLM wrote a long sentence. The voice
    reads long sentences in pieces of at most `MAX_IDS` ids (tts.piper_phonemes) and runs one such
    piece at load, slowly, so the arena reaches its size before the first turn and keeps it. A run
    bigger than the warm-up's (ids x length_scale: a piece with no word boundary to cut at, or
    very slow speech) runs with arena shrinkage, which frees what it added but is 13% slower and
    gives back the warmed size too."""

    def __init__(self, session, shrink_above: float = MAX_IDS * WARM_LENGTH_SCALE) -> None:
        import onnxruntime as ort

        if shrink_above <= 0:
            raise ValueError(f"shrink_above must be > 0, got {shrink_above}")
        self.session, self.shrink_above = session, shrink_above
        self._shrink = ort.RunOptions()
        self._shrink.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
        self.shrunk = 0  # runs that gave their arena growth back

    def run(self, output_names, input_feed, run_options=None):
        ids = input_feed.get("input")  # [1, n] phoneme ids
        scales = input_feed.get("scales")  # [3] noise, length, noise_w
        size = 0.0 if ids is None else ids.shape[-1] * (1.0 if scales is None else float(scales[1]))
        if run_options is None and size > self.shrink_above:
            run_options = self._shrink
            self.shrunk += 1
        return self.session.run(output_names, input_feed, run_options)

    def __getattr__(self, name: str):  # everything else Piper may read: the session's own
        return getattr(self.session, name)


class PiperVoiceModel:
    """Loads a Piper voice. `synthesize` returns the whole utterance as float32 at the
    voice's native rate (22.05 kHz for the embedded voice)."""

    def __init__(self, model_path: str | Path, config_path: str | Path | None = None, *, threads: int = 1):
        import onnxruntime as ort
        from piper.config import PiperConfig

        from tts.piper_phonemes import ParleyPiperVoice

        model_path = Path(model_path)
        config_path = Path(config_path) if config_path else Path(f"{model_path}.json")
        for p in (model_path, config_path):
            if not p.is_file():
                raise ModelNotFoundError(str(p), "Piper voice file not found")
        try:
            config = PiperConfig.from_dict(json.loads(config_path.read_text(encoding="utf-8")))
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = threads
            opts.inter_op_num_threads = 1
            # Every text length is a new input shape, and onnxruntime keeps a memory plan (and
            # its arena blocks) per shape: 400 sentences of 2-30 words grew resident memory by
            # 44.5 MB per 100 after warm-up (in steps, up to 564 MB). Without the plans it stayed
            # at 385 MB from the 350th to the 800th, at the same speed (RTF 0.091-0.099); without
            # the arena as well it was 13% slower. benchmarks/soak.py measures the session's slope.
            opts.enable_mem_pattern = False
            session = ort.InferenceSession(str(model_path), sess_options=opts, providers=["CPUExecutionProvider"])
        except (ValueError, KeyError, OSError, RuntimeError) as e:  # onnxruntime raises RuntimeError subclasses
            raise ModelCorruptError(str(model_path), f"cannot load Piper voice: {e}") from e
        self._voice = ParleyPiperVoice(session=ArenaBoundedSession(session), config=config,
                                       max_phonemes=(MAX_IDS - 3) // 2)  # ids: BOS, PAD, 2 a phoneme, EOS
        self.sample_rate = int(config.sample_rate)
        self._warm_arena()

    @property
    def arena_shrinks(self) -> int:
        """Runs that gave their arena growth back (ArenaBoundedSession.shrunk): each one also
        gives back the warmed size, which the next long sentence takes again."""
        return self._voice.session.shrunk

    def _warm_arena(self) -> None:
        """Run one input of the largest size the voice runs, so the arena grows here, at load
        (~0.6 s, heap 97 -> 351 MB), not at the first long sentence of a conversation: a soak's
        heap stepped +132 MB at turn 50 without it. An ordinary 14-word sentence takes it to
        ~220 MB anyway."""
        from piper.config import SynthesisConfig

        voice = self._voice
        phonemes = [p for piece in voice.phonemize(_WARM_TEXT) for p in [*piece, " "]]
        voice.phoneme_ids_to_audio(voice.phonemes_to_ids(phonemes[: voice.max_phonemes]),
                                   SynthesisConfig(length_scale=WARM_LENGTH_SCALE))

    @classmethod
    def default(cls, *, threads: int = 1) -> PiperVoiceModel:
        model = get_model("piper-joe-medium")
        onnx_path = model.path()
        return cls(onnx_path, Path(f"{onnx_path}.json"), threads=threads)

    def synthesize(self, text: str, options: PiperOptions = PiperOptions()) -> np.ndarray:  # [N] float32
        from piper.config import SynthesisConfig

        cfg = SynthesisConfig(
            speaker_id=options.speaker_id,
            length_scale=options.length_scale,
            noise_scale=options.noise_scale,
            noise_w_scale=options.noise_w_scale,
        )
        chunks = [c.audio_float_array for c in self._voice.synthesize(text, syn_config=cfg)]
        if not chunks:
            return np.zeros(0, dtype=np.float32)
        return np.concatenate(chunks).astype(np.float32, copy=False)
