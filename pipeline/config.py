"""SessionConfig: one frozen config for a voice session (models, thread budgets, policies,
instructions), loadable from a TOML file and from CLI flags (flags override the file)."""

from __future__ import annotations

import argparse
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from pipeline.budget import BudgetConfig, ResponsePolicy
from pipeline.context import ContextTrim

LLM_KINDS = ("parley", "openai", "fake")  # or "package.module:attr"
SPECULATIVE = ("auto", "head", "ngram", "none")
TTS_BACKENDS = ("piper", "espeak", "fake")
STT_MODELS = ("whisper-tiny.en", "whisper-base", "fake")
# the engine's CPU weight formats (llm_engine.config.WEIGHT_FORMATS, named here without
# importing torch: `parley -h` stays light; a test keeps the two equal)
WEIGHT_FORMATS = ("fp32", "bf16", "int8", "q4")
# our detector; VAD silence alone (a baseline); or the whole LiveKit-defaults assembly
# (pipeline/baseline.py: livekit's Silero + v1-mini + default endpointing + segment Whisper)
TURN_DETECTION = ("parley", "vad", "livekit")
# the text witness of our detector: the voice LLM (our engine only: pipeline.turn_text; with the
# embedded model its probe, pipeline.turn_probe), the LLM's own P of an end token ("llm-raw":
# what another model gets), or the detector's own word classifier (turn_detection.completeness)
TURN_TEXT = ("llm", "llm-raw", "words")
DEFAULT_INSTRUCTIONS = (
    "You are Parley, a friendly voice assistant. Your replies are spoken aloud, so answer in one or "
    "two short sentences of plain words, without lists, markdown or emoji.")


@dataclass(frozen=True)
class SessionConfig:
    instructions: str = DEFAULT_INSTRUCTIONS
    # the LLM: our engine, an OpenAI-compatible server, a livekit LLM by "module:attr", or a fake
    llm: str = "parley"
    model: str | None = None  # engine: a .gguf / HF dir (None: embedded); openai: the model name
    base_url: str | None = None  # openai: e.g. http://127.0.0.1:8000/v1 (vLLM, SGLang, parley serve)
    api_key_env: str = "OPENAI_API_KEY"  # openai: the environment variable holding the key
    weight_format: str | None = None  # engine: None = the engine's measured voice default
    speculative: str = "auto"
    max_tokens: int = 60  # a spoken reply is short; the history stays small
    # A reply at max_tokens finishes its sentence, up to this many tokens more (0: it stops at
    # max_tokens). The 5 demo replies (135M model) all ran into max_tokens, and 2 ended
    # mid-sentence ("...if you'd like").
    sentence_grace_tokens: int = 40
    # The reply ends at its n-th sentence end (0: no limit; ParleyLLM's replies). The 135M model
    # goes on past the instructions' "one or two short sentences" (3 of the 5 demo replies, up
    # to 19 s of speech), but 2 is not the default: side by side on the bundled sample, turns
    # after two-sentence replies waited longer to end (perceived p50 622 / 648 ms against 567 /
    # 565, both orders: the turn probe reads the words in the conversation's context).
    max_sentences: int = 0
    # The history a request may carry (tokens, reply included). A 200-turn soak reached the
    # engine's 8192-token window; each trim there re-prefilled ~6000 tokens, past the LLM
    # deadline on the loaded 2 cores, and every later turn timed out (benchmarks/soak.py).
    context_tokens: int = 2048
    temperature: float = 0.0  # greedy: deterministic, and speculation verifies it exactly
    repetition_penalty: float = 1.1
    stt: str = "whisper-tiny.en"
    tts: str = "piper"
    output_rate: int = 24_000
    # thread budget per stage: 2 shared cores (ASSETS.md: 2 intra-op threads beside a busy
    # core ran 25-30x slower than 1)
    llm_threads: int = 1
    stt_threads: int = 1
    # ...but the synthesis the user waits for gets both cores: with more than 1 TTS thread and
    # our engine, the engine steps aside while Piper runs (parley.cores.CoreGate). A 2-word
    # chunk: 122 ms at 1 thread, 73 ms at 2 on an idle machine, 167 ms at 2 beside a busy core
    # (2-core Zen 1). The LLM, far ahead of the speech, loses nothing the user hears.
    tts_threads: int = 2
    # The LLM's steps that compute a reply's first tokens (parley.cores.LEAD_TOKENS) may borrow
    # the cores too, with our engine and Whisper: the STT steps aside. Off (1): with a hold per
    # step the reply's first token came sooner (LLM request to first token p50 / p90 92 / 116 ->
    # 60 / 78 ms), but its first audio did not (884 -> 903 ms): the pause decode's word
    # alignment slipped in between two steps and ran beside the first chunk's synthesis
    # (benchmarks/results/2026-12-07-cpu2zen1-voice-lead-ab.json). The engine now keeps the
    # hold across the lead's steps; that is not yet measured in the loop.
    llm_lead_threads: int = 1
    vad_threads: int = 1
    # numpy's BLAS (the STT's features, the turn detector's matmuls): at numpy's default of a
    # thread per core its worker spins after each call (pipeline.components.limit_blas_threads)
    blas_threads: int = 1
    # turn taking
    turn_detection: str = "parley"
    vad_silence_s: float = 0.5  # turn_detection = "vad": silence that ends the turn
    turn_text: str = "llm"  # turn_detection = "parley" with our engine; otherwise "words" is used
    # How long the turn waits for the engine's text P of the newest words before the detector's
    # own word scorer answers instead. The engine scores on a thread of its own
    # (pipeline.turn_text.BackgroundScorer), so the wait holds only the decision, never the
    # audio. On a 2-core Zen 1 the engine, busy with the words prefilled ahead and the STT's
    # decodes beside it, took 130-256 ms a score, and 4 of 9 ran into the old 0.25 s limit; the
    # word scorer then gave "What is the capital of Australia" 0.29, and that turn waited 2 s.
    turn_text_timeout_s: float = 0.6
    preemptive: bool = True
    prefill_ahead: bool = True  # engine: prefill the words so far while the user speaks
    interruption_min_s: float = 0.0  # speech (after the VAD's own 0.1 s) that interrupts the agent
    false_interruption_timeout_s: float = 1.0  # an interruption with no words after this resumes
    aec_warmup_s: float = 0.0  # barge-in ignored this long after the agent starts (0: never)
    # stage deadlines: the longest wait for the LLM's next token (the first included) and for
    # the TTS's next frame once it has text; a stall past one is a StageTimeoutError, an
    # apology and a recovered session. Generous: the embedded engine's first token on a long
    # prompt takes ~1-2 s on the 2 shared cores, a Piper clause ~0.3 s.
    llm_deadline_s: float = 10.0
    tts_deadline_s: float = 10.0
    # the final transcript, from the end-of-turn decision: past it the turn is answered from
    # the newest interim words (an apology if none). A final normally takes 0-0.3 s on the 2
    # cores (benchmarks/stt.py); the margin is for many sessions sharing them.
    stt_deadline_s: float = 2.5
    # a full garbage collection after each reply has played (pipeline.session.collect_after_reply)
    collect_after_reply: bool = True
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    response: ResponsePolicy = field(default_factory=ResponsePolicy)

    @property
    def reply_token_limit(self) -> int:
        """The most tokens a reply may have (the engine request's max_tokens, the context's reserve)."""
        return self.max_tokens + self.sentence_grace_tokens

    @property
    def user_turn_tokens(self) -> int:
        """The user turn's share of the history budget (fit_context's `allowance`): a turn up
        to this long keeps the history the session prefilled while the reply played. 128 at
        the default budget: ~90 words, longer than a spoken turn usually is."""
        return self.context_tokens // 16

    @property
    def trim(self) -> ContextTrim:
        """How every request of the session trims its history: the request, prefill-ahead, the
        next turn's prefill and the LLM witness all use this one, so they keep the same prefix."""
        return ContextTrim(self.reply_token_limit, self.context_tokens, self.user_turn_tokens)

    def __post_init__(self) -> None:
        if self.llm not in LLM_KINDS and ":" not in self.llm:
            raise ValueError(f"llm must be one of {LLM_KINDS} or 'module:attr', got {self.llm!r}")
        if self.llm == "openai" and not self.base_url:
            raise ValueError("llm = 'openai' needs base_url (e.g. http://127.0.0.1:8000/v1)")
        checks = (("speculative", SPECULATIVE), ("tts", TTS_BACKENDS), ("stt", STT_MODELS),
                  ("turn_detection", TURN_DETECTION), ("turn_text", TURN_TEXT))
        for name, allowed in checks:
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")
        if self.weight_format is not None and self.weight_format not in WEIGHT_FORMATS:
            raise ValueError(f"weight_format must be one of {WEIGHT_FORMATS}, got {self.weight_format!r}")
        if not 0 <= self.sentence_grace_tokens <= 1024:
            raise ValueError("sentence_grace_tokens must be in [0, 1024]")
        if not 0 <= self.max_sentences <= 1000:
            raise ValueError("max_sentences must be in [0, 1000] (0: no limit)")
        if not 2 * self.reply_token_limit <= self.context_tokens <= 1_000_000:
            raise ValueError("context_tokens must be at least twice max_tokens + sentence_grace_tokens (and <= 1e6)")
        if not 1 <= self.max_tokens <= 4096 or not 0 <= self.temperature <= 2 or self.repetition_penalty <= 0:
            raise ValueError("need 1 <= max_tokens <= 4096, 0 <= temperature <= 2, repetition_penalty > 0")
        if self.output_rate not in (8_000, 16_000, 22_050, 24_000, 44_100, 48_000):
            raise ValueError(f"output_rate {self.output_rate} is not a supported rate")
        for name in ("llm_threads", "stt_threads", "tts_threads", "llm_lead_threads", "vad_threads", "blas_threads"):
            if not 1 <= getattr(self, name) <= 64:
                raise ValueError(f"{name} must be in [1, 64]")
        if not 0 < self.turn_text_timeout_s <= 5:
            raise ValueError("turn_text_timeout_s must be in (0, 5]")
        if not 0.1 <= self.vad_silence_s <= 5 or not 0 <= self.interruption_min_s <= 5:
            raise ValueError("need 0.1 <= vad_silence_s <= 5 and 0 <= interruption_min_s <= 5")
        if not 0 <= self.aec_warmup_s <= 10:
            raise ValueError("aec_warmup_s must be in [0, 10]")
        if not 0.1 <= self.false_interruption_timeout_s <= 10:
            raise ValueError("false_interruption_timeout_s must be in [0.1, 10]")
        if not all(0.05 <= d <= 300 for d in (self.llm_deadline_s, self.tts_deadline_s, self.stt_deadline_s)):
            raise ValueError("llm_deadline_s, tts_deadline_s and stt_deadline_s must be in [0.05, 300]")
        if not self.instructions.strip():
            raise ValueError("instructions must not be empty")

    # -- loading ----------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SessionConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown session config keys: {', '.join(unknown)} (known: {', '.join(sorted(known))})")
        data = dict(data)
        if "budget" in data:
            data["budget"] = BudgetConfig(**data["budget"])
        if "response" in data:
            resp = dict(data["response"])
            if "ack_phrases" in resp:
                resp["ack_phrases"] = tuple(resp["ack_phrases"])
            data["response"] = ResponsePolicy(**resp)
        return cls(**data)

    @classmethod
    def from_toml(cls, path: str | Path) -> SessionConfig:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"session config {path} not found")
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as e:
            raise ValueError(f"{path}: not valid TOML: {e}") from e
        try:
            return cls.from_dict(data)
        except TypeError as e:
            raise ValueError(f"{path}: {e}") from e

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        g = parser.add_argument_group("session")
        g.add_argument("--config", help="a TOML session config (flags below override it)")
        g.add_argument("--llm", help="parley (default), openai, fake, or module:attr (a livekit LLM or factory)")
        g.add_argument("--model", help="engine: .gguf or HF dir; openai: the model name")
        g.add_argument("--base-url", dest="base_url", help="openai: the server's /v1 URL")
        g.add_argument("--instructions", help="the agent's system prompt")
        g.add_argument("--speculative", choices=SPECULATIVE)
        g.add_argument("--weight-format", dest="weight_format", choices=WEIGHT_FORMATS)
        g.add_argument("--stt", choices=STT_MODELS)
        g.add_argument("--tts", choices=TTS_BACKENDS)
        g.add_argument("--turn-detection", dest="turn_detection", choices=TURN_DETECTION)
        g.add_argument("--turn-text", dest="turn_text", choices=TURN_TEXT,
                       help="what judges the words at a pause: the voice LLM (its probe with the embedded "
                            "model), the LLM's own P of an end token, or the word classifier")
        g.add_argument("--no-preemptive", dest="preemptive", action="store_const", const=False)
        g.add_argument("--no-ack", dest="ack", action="store_const", const=False)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> SessionConfig:
        base = cls.from_toml(args.config) if getattr(args, "config", None) else cls()
        names = ("llm", "model", "base_url", "instructions", "speculative", "weight_format", "stt", "tts",
                 "turn_detection", "turn_text", "preemptive")
        over = {k: getattr(args, k) for k in names if getattr(args, k, None) is not None}
        if getattr(args, "ack", None) is False:
            over["response"] = replace(base.response, ack_enabled=False)
        return replace(base, **over)
