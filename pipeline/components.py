"""The models a voice session runs on, loaded once per process and shared by its sessions
(the LLM engine batches them; the Whisper, Silero, detector and Piper models are read-only).
Per-session state (a transcriber, streams) is made from these by `new_transcriber()`."""

from __future__ import annotations

import importlib
import logging
import os
from dataclasses import dataclass
from typing import Any

from llm_engine.sampling_params import SamplingParams
from pipeline.config import SessionConfig

log = logging.getLogger("parley.components")


@dataclass
class Components:
    config: SessionConfig
    llm: Any  # a livekit llm.LLM, or None when the engine below backs our own plugin
    engine: Any  # LLMEngine / FakeLLM, or None for external LLMs
    decoder: Any  # stt.WhisperDecoder (None with the fake STT)
    vad: Any  # turn_detection.SileroVAD
    detector: Any  # EndOfTurnDetector (or a fake with the same stream() API)
    synthesizer: Any  # tts.Synthesizer
    transcriber_factory: Any = None  # () -> a transcriber; None: from the config

    def sampling_params(self) -> SamplingParams:
        c = self.config
        return SamplingParams(max_tokens=c.reply_token_limit, temperature=c.temperature,
                              repetition_penalty=c.repetition_penalty)

    def new_transcriber(self):
        from stt import FakeTranscriber, StreamingTranscriber, TranscriberConfig

        if self.transcriber_factory is not None:
            return self.transcriber_factory()
        if self.config.stt == "fake":
            return FakeTranscriber()
        cfg = TranscriberConfig(model=self.config.stt, cpu_threads=self.config.stt_threads)
        return StreamingTranscriber(cfg, decoder=self.decoder)

    def close(self) -> None:
        close = getattr(self.engine, "close", None)
        if close is not None:
            close()


def load_engine(config: SessionConfig) -> Any:
    from llm_engine import FakeLLM, LLMEngine

    if config.llm == "fake":
        return FakeLLM()
    overrides: dict[str, Any] = {"num_threads": config.llm_threads}
    if config.weight_format is not None:
        overrides["weight_format"] = config.weight_format
    if config.speculative == "none":
        overrides["speculative"] = None
    elif config.speculative != "auto":
        from llm_engine.speculative.config import SpeculativeConfig

        overrides["speculative"] = SpeculativeConfig(method=config.speculative)
    return LLMEngine.for_voice(config.model, **overrides)


def external_llm(config: SessionConfig) -> Any:
    """An OpenAI-compatible server through livekit's OpenAI plugin, or `module:attr`: a livekit
    llm.LLM instance, or a class / factory called with no arguments that returns one."""
    from livekit.agents import llm as lk_llm

    if config.llm == "openai":
        from livekit.plugins import openai

        key = os.environ.get(config.api_key_env, "no-key")
        return openai.LLM(model=config.model or "default", base_url=config.base_url, api_key=key,
                          temperature=config.temperature)
    module_name, _, attr = config.llm.partition(":")
    try:
        obj = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"--llm {config.llm}: cannot import {attr!r} from {module_name!r}: {e}") from e
    if not isinstance(obj, lk_llm.LLM) and callable(obj):
        obj = obj()
    if not isinstance(obj, lk_llm.LLM):
        raise ValueError(f"--llm {config.llm}: {type(obj).__name__} is not a livekit llm.LLM (or a factory of one)")
    return obj


def limit_blas_threads(threads: int) -> dict[str, int]:
    """Cap the BLAS libraries this process has loaded (numpy's OpenBLAS) at `threads`, for the
    whole process: the session's thread budget for numpy, as `llm_threads` is torch's. An
    OpenBLAS worker spins after each call before it sleeps: at numpy's default of a thread per
    core, `blas_thread_server` took 6% of a 10-turn voice benchmark's CPU samples (perf), and
    the process used 61.5 s of user CPU against 51.8 s at 1 (2 runs each, alternating; 2-core
    Xeon; perceived latency the same within the runs' spread). -> {library path: its thread
    count before}."""
    from threadpoolctl import threadpool_info, threadpool_limits

    before = {i["filepath"]: i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}
    threadpool_limits(limits=threads, user_api="blas")
    return before


def load_components(config: SessionConfig, *, engine: Any = None, synthesizer: Any = None,
                    detector: Any = None, transcriber_factory: Any = None) -> Components:
    """Blocking (seconds): call it off the event loop. Stages given explicitly are used as is
    (tests hand in timed fakes). Applies the config's numpy BLAS budget (limit_blas_threads)."""
    from parley.cores import CoreGate
    from tts import create_synthesizer
    from turn_detection import EndOfTurnDetector, EndpointingPolicy
    from turn_detection.vad import SileroVAD

    limit_blas_threads(config.blas_threads)
    lk_llm = None if config.llm in ("parley", "fake") else external_llm(config)
    decoder = None
    if config.stt != "fake":
        from stt import TranscriberConfig, WhisperDecoder

        decoder = WhisperDecoder(TranscriberConfig(model=config.stt, cpu_threads=config.stt_threads))
    vad = SileroVAD(threads=config.vad_threads)
    if detector is None:
        if config.turn_detection == "vad":  # a silence threshold alone: P = 1 at every pause
            # no classifier, no text scorer: P is 0.5 at every pause, and the bar is 0.5 from
            # vad_silence_s on
            detector = EndOfTurnDetector(vad, None, EndpointingPolicy(
                eval_silence_s=config.vad_silence_s, min_wait_s=config.vad_silence_s,
                max_wait_s=config.vad_silence_s + 0.01, high=0.5, low=0.4))
        else:
            detector = EndOfTurnDetector.load(threads=config.vad_threads)
    built_engine, built_synth = engine is None and config.llm in ("parley", "fake"), synthesizer is None
    if config.llm in ("parley", "fake") and engine is None:
        engine = load_engine(config)
    if synthesizer is None:
        synthesizer = create_synthesizer(config.tts, threads=config.tts_threads)
    # One gate: whoever borrows the cores (the synthesis; a reply's first tokens with
    # llm_lead_threads > 1), the others wait, at most 0.5 s a step or a decode's part. The STT
    # waits for both: an alignment after a preflight that waited for the reply's first tokens
    # alone ran beside the first chunk's synthesis (first audio p50 842 -> 876 ms).
    gate = CoreGate()
    if built_engine and built_synth and config.tts_threads > 1:
        engine.core_gate = synthesizer.core_gate = gate  # the synthesis borrows the engine's core
    if built_engine and decoder is not None and config.llm_lead_threads > 1:
        engine.lead_gate = decoder.core_gate = gate  # a reply's first tokens borrow the STT's core
        engine.lead_threads = config.llm_lead_threads
        # a preemptive reply is asked at the preflight: its first tokens before the alignment
        decoder.lead_expect_s = 0.1 if config.preemptive else 0.0
    warm_up(engine if built_engine else None, decoder, synthesizer if built_synth else None,
            [{"role": "system", "content": config.instructions}],
            config.response.ack_phrases if config.response.ack_enabled else ())
    return Components(config, lk_llm, engine, decoder, vad, detector, synthesizer, transcriber_factory)


def warm_up(engine: Any, decoder: Any, synthesizer: Any, messages: list[dict[str, Any]],
            phrases: tuple[str, ...] = ()) -> dict[str, float]:
    """Run each model once at load, so the first turn pays no one-time cost (None: skipped),
    and keep the audio of `phrases` (the acknowledgements). Measured on a 2-core Zen 1: the
    engine's first 60-token chat took 954 ms to its first token in a fresh process, 259 ms
    right after this warm-up (the system prompt cached by it). -> seconds per stage (logged)."""
    seconds = {}
    if engine is not None:
        seconds["llm"] = engine.warmup(messages)
    if decoder is not None:
        seconds["stt"] = decoder.warmup()
    if synthesizer is not None:
        seconds["tts"] = synthesizer.remember(phrases) if phrases else synthesizer.warmup()
    log.info("warm-up seconds: %s", {k: round(v, 3) for k, v in seconds.items()})
    return seconds
