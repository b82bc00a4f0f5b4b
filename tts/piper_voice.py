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


class ArenaBoundedSession:
    """The onnxruntime session Piper runs, giving back what a long input adds to the arena.

    onnxruntime's CPU arena grows (doubling) to fit the largest input it has seen and never
    shrinks. Measured (jemalloc's heap in use, one process): after sentences of up to 21 words
    221 MB, then one of 28 words 353 MB, 56 words 618 MB, 112 words 1145 MB, kept for the
    process's life; a 200-turn soak jumped +397 MB once the LLM wrote a long sentence. A run
    with arena shrinkage frees what it added (93-101 MB after the same texts) but is 13% slower,
    so only inputs past `shrink_above` phoneme ids (~10 a word) run with it: the arena stays
    bounded by the sentences of ordinary length, which keep their speed."""

    def __init__(self, session, shrink_above: int = 250) -> None:
        import onnxruntime as ort

        if shrink_above < 1:
            raise ValueError(f"shrink_above must be >= 1, got {shrink_above}")
        self.session, self.shrink_above = session, shrink_above
        self._shrink = ort.RunOptions()
        self._shrink.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
        self.shrunk = 0  # runs that gave their arena growth back

    def run(self, output_names, input_feed, run_options=None):
        ids = input_feed.get("input")  # [1, n] phoneme ids
        if run_options is None and ids is not None and ids.shape[-1] > self.shrink_above:
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

        from tts.espeak_phonemes import LeakFreePiperVoice

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
        self._voice = LeakFreePiperVoice(session=ArenaBoundedSession(session), config=config)
        self.sample_rate = int(config.sample_rate)

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
