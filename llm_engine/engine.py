"""LLMEngine: the public entry point (generate, chat, stream_chat, abort) over one step loop."""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from contextlib import ExitStack, nullcontext
from pathlib import Path
from typing import Any

import torch

from kernels.cpu_native import thread_budget
from llm_engine.block_manager import BlockManager
from llm_engine.config import EngineConfig
from llm_engine.detokenizer import IncrementalDetokenizer
from llm_engine.kv_cache import KVCache
from llm_engine.loader import load_model
from llm_engine.model import LlamaModel
from llm_engine.model_runner import ModelRunner
from llm_engine.outputs import PromptScore, RequestOutput
from llm_engine.request import Request, Sink
from llm_engine.sampler import Sampler
from llm_engine.sampling_params import SamplingParams
from llm_engine.scheduler import Scheduler
from llm_engine.sequence import Sequence, SequenceStatus
from llm_engine.streaming import ChatStream
from llm_engine.tokenizer import Tokenizer
from parley.cores import LEAD_TOKENS
from parley.errors import EngineClosedError

log = logging.getLogger(__name__)

DEFAULT_MODEL = "smollm2-135m-instruct"
# LLMEngine.for_voice(): the voice loop's defaults, chosen by `parley bench llm --stream-only`
# (benchmarks/results/2026-12-04-cpu2zen4-llm_engine-stream.json, 2-core Zen 4, 1 thread,
# shared machine): first clause with "auto" 423 ms int8 vs 927 bf16 vs 1013 fp32 in the same
# run (load ~8: idle is several times faster); greedy replies agree with fp32's on 0/8 prompts
# in int8 (7/8 bf16), but the divergences are near-ties: fp32 scores int8's replies at 0.708
# nats/token against 0.676 for its own argmax path (bf16 0.695). "auto" (EAGLE head + n-gram
# lookup) streamed 1.35x plain in int8 at 1 client and never changes the text. "q4" (the GGUF's
# own 4-bit blocks) decodes ~1.2x int8 and stays nearer fp32 (0.721 vs 0.788 nats/token); with
# every layer in one C++ call its first clause also came sooner (plain 94 vs 109 ms, "auto" 116
# vs 118: benchmarks/results/2026-12-06-cpu2x167-llm_engine-stream-stack.json), but the turn
# detector's text probe (pipeline/turn_probe.py) is trained on this engine's int8 hidden
# states, so int8 stays until the probe is retrained and revalidated on q4's.
VOICE_WEIGHT_FORMAT = "int8"
VOICE_SPECULATIVE = "auto"


class LLMEngine:
    def __init__(self, model: LlamaModel, tokenizer: Tokenizer, config: EngineConfig) -> None:
        self.config = config
        self.model = model
        self.tokenizer = tokenizer
        self.device = config.resolved_device()
        mcfg = model.cfg
        self.max_model_len = config.max_model_len or mcfg.max_position_embeddings
        nb = config.resolved_num_blocks()
        self.bm = BlockManager(nb, config.block_size, config.enable_prefix_caching)
        self.kv = KVCache(mcfg, nb, config.block_size, config.resolved_dtype(), self.device)
        self.scheduler = Scheduler(self.bm, config.max_num_seqs, config.max_num_batched_tokens,
                                   config.hint_chunk_tokens)
        graphs = None
        if self.device.type == "cuda" and not config.enforce_eager:
            from llm_engine.cuda_graph import CudaGraphRunner

            graphs = CudaGraphRunner(model, self.kv, config.cuda_graph_batch_sizes,
                                     -(-self.max_model_len // config.block_size))
        self.runner = ModelRunner(model, self.kv, self.bm, self.device, graphs)
        self.sampler = Sampler()
        self.eos_token_ids = frozenset(mcfg.eos_token_ids) | frozenset(tokenizer.eos_token_ids)
        # every admitted, unfinished request (queued or scheduled); its membership changes
        # under _admit_lock only, which is never held across a model step
        self.requests: dict[str, Request] = {}
        self.speculative = None  # SpeculativeConfig: set by from_pretrained(speculative=...)
        # parley.cores.CoreGate: the engine thread waits before each step while another stage
        # holds it (a voice session's TTS synthesizing at 2 threads); None: never waits
        self.core_gate = None
        # parley.cores.CoreGate the engine thread holds while a step computes a reply's first
        # LEAD_TOKENS tokens, at `lead_threads` kernel threads (a voice session's STT waits for
        # it before each part of a decode); None or 1 thread: never
        self.lead_gate = None
        self.lead_threads = 1
        self._lead_held = False  # the engine thread holds lead_gate (its own state)
        self._spec = None  # the StepSpeculator built for self.speculative
        self._lock = threading.RLock()  # held by step(): one model step at a time
        self._admit_lock = threading.Lock()
        self._inbox: queue.SimpleQueue[Request] = queue.SimpleQueue()  # admitted, not yet scheduled
        self._aborts: queue.SimpleQueue[Request] = queue.SimpleQueue()  # aborted, blocks not yet freed
        self._wake = threading.Event()
        self._in_step = False
        self._unflushed: list[Request] = []  # requests with deltas this step (Request.flush)
        self._worker: threading.Thread | None = None
        self._closed = False  # set by close(), under _admit_lock
        self._ids = itertools.count()

    @classmethod
    def from_pretrained(cls, path: str | Path | None = None, dtype: torch.dtype | None = None,
                        device: str | None = None, *, speculative: Any = None, **engine_kwargs: Any
                        ) -> LLMEngine:
        """path: a Hugging Face dir or a .gguf file; None loads the embedded SmolLM2-135M-Instruct.
        engine_kwargs: any EngineConfig field (block_size, num_blocks, max_num_seqs, backend, ...)."""
        config = EngineConfig(dtype=dtype, device=device, **engine_kwargs)
        if config.num_threads is not None:
            torch.set_num_threads(config.num_threads)
        if path is None:
            from parley.assets import model_path

            path = model_path(DEFAULT_MODEL)
        model, tok = load_model(path, config)
        if config.weight_format != "fp32":
            from llm_engine.quant import quantize_model

            quantize_model(model, config.weight_format)
        engine = cls(model, tok, config)
        if speculative is not None:
            from llm_engine.speculative.config import SpeculativeConfig

            if not isinstance(speculative, SpeculativeConfig):
                raise ValueError("speculative must be a SpeculativeConfig or None")
        engine.speculative = speculative
        return engine

    @classmethod
    def for_voice(cls, path: str | Path | None = None, **overrides: Any) -> LLMEngine:
        """The engine the voice loop and `parley serve` use: VOICE_DEFAULTS (chosen by
        measurement, see the constant) with any from_pretrained() argument overriding them."""
        from llm_engine.speculative.config import SpeculativeConfig

        kw: dict[str, Any] = {"weight_format": VOICE_WEIGHT_FORMAT,
                              "speculative": SpeculativeConfig(method=VOICE_SPECULATIVE)}
        kw.update(overrides)
        return cls.from_pretrained(path, **kw)

    @property
    def num_blocks(self) -> int:
        return len(self.bm.blocks)

    @property
    def num_free_blocks(self) -> int:
        """Blocks on the free list (a prefix-cached block nobody holds counts as free)."""
        return self.bm.num_free_blocks

    @property
    def spec_metrics(self):
        """Aggregate SpecMetrics since speculation was configured (None without it)."""
        return None if self._spec is None else self._spec.metrics

    # ---- requests (any thread; never waits for a running step) --------------------
    def _prompt_ids(self, prompt: str | list[int]) -> list[int]:
        if isinstance(prompt, str):
            if not prompt:
                raise ValueError("empty prompt")
            return self.tokenizer.encode(prompt)
        ids = list(prompt)
        if not ids:
            raise ValueError("empty prompt (no token ids)")
        vocab = self.model.cfg.vocab_size
        if any(not isinstance(t, int) or not 0 <= t < vocab for t in ids):
            raise ValueError(f"token ids must be integers in [0, {vocab})")
        return ids

    def _checked(self, prompt: str | list[int], params: SamplingParams | None
                 ) -> tuple[list[int], SamplingParams]:
        params = params or SamplingParams()
        if not isinstance(params, SamplingParams):
            raise ValueError(f"params must be SamplingParams, got {type(params).__name__}")
        ids = self._prompt_ids(prompt)
        limit = self.token_limit
        if len(ids) >= limit:
            raise ValueError(f"prompt has {len(ids)} tokens; the limit is {limit - 1} "
                             f"(context {self.max_model_len}, cache {self.bm.block_size * len(self.bm.blocks)})")
        return ids, params

    def _new_id(self) -> str:
        return f"req-{next(self._ids)}"

    def add_request(self, prompt: str | list[int], params: SamplingParams | None = None,
                    request_id: str | None = None, sink: Sink | None = None) -> str:
        """Queue a request for the engine thread; returns its id at once. Bad input raises
        ValueError here. sink(delta, final) is called from the engine thread. A request id
        stays taken until the request's blocks are freed (normally within one step)."""
        ids, params = self._checked(prompt, params)
        return self._admit(ids, params, request_id, sink)

    def _admit(self, ids: list[int], params: SamplingParams, request_id: str | None, sink: Sink | None,
               prefill_only: bool = False, score_ids: tuple[int, ...] = ()) -> str:
        rid = request_id if request_id is not None else self._new_id()
        detok = IncrementalDetokenizer(self.tokenizer, params.stop, params.skip_special_tokens,
                                       params.include_stop_str_in_output)
        req = Request(Sequence(rid, ids, params, prefill_only=prefill_only, score_ids=score_ids), detok, sink)
        with self._admit_lock:
            if self._closed:
                raise EngineClosedError("the LLM engine is closed: it takes no new requests")
            if rid in self.requests:
                raise ValueError(f"request id {rid!r} is already running")
            self.requests[rid] = req
        self._inbox.put(req)
        self._wake.set()
        return rid

    def prefill(self, messages: list[dict[str, Any]], request_id: str | None = None) -> str:
        """Compute and cache the KV of a conversation's prompt without generating (prefill
        ahead: a voice session sends the interim transcript while the user still speaks).

        The prompt is the chat template applied exactly as stream_chat applies it, generation
        prompt included: when the final transcript equals the interim one, the real request's
        prompt IS this prompt and every full block of it hits; when the last words changed,
        the blocks before the change hit either way. Runs in the engine thread (call
        ensure_worker(), or step()), generates nothing, never preempts or evicts a running
        request (a prefill that does not fit is dropped, finish_reason "abort"), and
        abort(id) cancels it. Its final RequestOutput (finish_reason "prefill") goes nowhere."""
        ids, params = self._checked(self.encode_chat(messages), SamplingParams(max_tokens=1))
        rid = self._admit(ids, params, request_id, None, prefill_only=True)
        self.ensure_worker()
        return rid

    def next_token_probability(self, prompt: str | list[int], token_ids: list[int] | tuple[int, ...],
                               timeout_s: float = 1.0) -> float | None:
        """P(the token after `prompt` is one of `token_ids`): score_prompt's P alone."""
        scored = self.score_prompt(prompt, token_ids, timeout_s)
        return None if scored is None else scored.next_token_p

    def score_prompt(self, prompt: str | list[int], token_ids: list[int] | tuple[int, ...],
                     timeout_s: float = 1.0) -> PromptScore | None:
        """P(the token after `prompt` is one of `token_ids`) and the final hidden state at the
        prompt's last token, from one prefill-only request: the prompt's KV is computed (full
        blocks from the prefix cache, and cached for the next call) and only its last row is
        read; nothing is generated. A turn detector asks it whether the user's words so far
        end their turn (pipeline.turn_text).

        Blocks the calling thread (never call it on the engine thread) for at most
        `timeout_s`; None when the engine could not answer in time (the request is then
        aborted), dropped it (no room without evicting a running request) or failed."""
        ids, params = self._checked(prompt, SamplingParams(max_tokens=1))
        vocab = self.model.cfg.vocab_size
        score = tuple(int(t) for t in token_ids)
        if not score or any(not 0 <= t < vocab for t in score):
            raise ValueError(f"token_ids must be a non-empty list of ids in [0, {vocab})")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        if threading.current_thread() is self._worker:
            raise RuntimeError("score_prompt waits for the engine thread: not from a sink")
        done = threading.Event()
        result: list[RequestOutput] = []

        def sink(_delta: str, final: RequestOutput | None) -> None:
            if final is not None:
                result.append(final)
                done.set()

        rid = self._admit(ids, params, None, sink, prefill_only=True, score_ids=score)
        self.ensure_worker()
        if not done.wait(timeout_s):
            self.abort(rid)
            return None
        out = result[0]
        p = out.metrics.get("next_token_p")
        return None if p is None or out.hidden is None else PromptScore(p, out.hidden)

    @property
    def token_limit(self) -> int:
        return min(self.max_model_len, self.bm.block_size * len(self.bm.blocks))

    def abort(self, request_id: str) -> bool:
        """Stop a request now (its stream ends with finish_reason "abort") and free its blocks:
        at once when no step is running, else as soon as the running step returns. Safe from
        any thread and from inside a sink. False if the id is unknown or already finished."""
        req = self.requests.get(request_id)
        if req is None or req.output is not None:
            return False
        self._aborts.put(req)
        req.finish("abort")
        self._wake.set()
        if self._lock.acquire(blocking=False):  # the caller may be the engine thread (a sink)
            try:
                if not self._in_step:
                    self._drain_aborts()
            finally:
                self._lock.release()
        return True

    # ---- the step loop (engine lock held) ---------------------------------------------
    def has_unfinished(self) -> bool:
        return bool(self.requests) or self.scheduler.has_work()

    def _drain_inbox(self) -> None:
        while True:
            try:
                req = self._inbox.get_nowait()
            except queue.Empty:
                return
            if req.output is None:
                self.scheduler.add(req.seq)

    def _drain_aborts(self) -> None:
        while True:
            try:
                req = self._aborts.get_nowait()
            except queue.Empty:
                return
            self._release(req)

    def _release(self, req: Request) -> None:
        seq = req.seq
        self.scheduler.remove(seq)
        seq.status = SequenceStatus.FINISHED
        self.sampler.release(seq.request_id)
        if self._spec is not None:
            self._spec.release(seq)
        with self._admit_lock:
            if self.requests.get(seq.request_id) is req:
                del self.requests[seq.request_id]

    def _speculator(self):
        """The StepSpeculator for self.speculative (rebuilt when the config object changes)."""
        cfg = self.speculative
        if cfg is None:
            self._spec = None
        elif self._spec is None or self._spec.cfg is not cfg:
            from llm_engine.speculative.step import StepSpeculator

            self._spec = StepSpeculator(self, cfg)
        return self._spec

    def step(self) -> list[RequestOutput]:
        """One scheduler step: drafts (when speculating), one model pass over every scheduled
        sequence's tokens, acceptance; returns the requests that finished."""
        with self._lock:
            self._in_step = True
            try:
                self._drain_inbox()
                self._drain_aborts()
                done = self._step_locked()
                for req in self._unflushed:
                    req.flush()
            finally:
                self._unflushed.clear()
                self._in_step = False
            self._drain_aborts()
            return done

    def _step_locked(self) -> list[RequestOutput]:
        spec = self._speculator()
        if spec is not None:
            spec.plan(self.scheduler.running)  # drafts appended to decoding sequences
        batch = self.scheduler.schedule()
        self.kv.copy_blocks(batch.copies)  # before anything writes the blocks they come from
        done = [self._finish(s, "abort") for s in self.scheduler.dropped if s.request_id in self.requests]
        self.scheduler.dropped.clear()
        if spec is not None:
            spec.fit(batch, self.scheduler)  # drafts of sequences not scheduled whole are dropped
        if not batch:
            return [o for o in done if o is not None]
        t0 = time.perf_counter()
        out = self.runner.run(batch, features=spec is not None and spec.wants_features)
        at = dict(zip(out.sample_rows, out.logit_starts))
        plain, verify = [], []
        for i, (seq, n) in enumerate(zip(batch.seqs, batch.num_tokens)):
            seq.num_computed_tokens += n
            k = batch.drafts(i)
            feats = None if out.features is None else out.features[out.row_starts[i]: out.row_starts[i] + n]
            if k == 0:
                self.bm.commit_full_blocks(seq)
                if spec is not None and feats is not None:
                    spec.observe(seq, feats)
            j = at.get(i)
            if j is None:
                continue
            if seq.prefill_only:
                p, h = self._prompt_score(seq, out.logits[j], out.hidden[out.logits_indices[j]])
                done.append(self._finish(seq, "prefill", p, h))
            elif k:
                verify.append((seq, out.logits[j: j + k + 1], feats))
            else:
                plain.append((seq, j))
        if plain:
            rows = out.logits[[j for _, j in plain]]
            tokens = self.sampler.sample(rows, [(s.request_id, s.params, s.token_ids) for s, _ in plain])
            for (seq, _), tok in zip(plain, tokens):
                if spec is not None:
                    spec.record(seq, 0, 0, 1)
                done.append(self._append(seq, tok))
        for seq, logits, feats in verify:
            done.extend(spec.verify(seq, logits, feats))
        if spec is not None:
            spec.observe_step(batch, time.perf_counter() - t0)
        return [o for o in done if o is not None]

    def _append(self, seq: Sequence, token: int) -> RequestOutput | None:
        """Emit one accepted token; finish the request on a stop / the limit."""
        reason = self._emit(seq, token)
        return None if reason is None else self._finish(seq, reason)

    def _emit(self, seq: Sequence, token: int) -> str | None:
        """Append one accepted token, detokenize, stream the delta; -> the finish reason, if any
        (the caller finishes the request). Also "abort" when the request was aborted meanwhile."""
        req = self.requests.get(seq.request_id)
        if req is None or req.seq is not seq or req.output is not None:
            return "abort"  # aborted while this step ran: its blocks go after the step
        if req.t_first_token is None:
            req.t_first_token = time.perf_counter()
        seq.token_ids.append(token)
        req.num_emitted += 1
        p = seq.params
        reason = None
        if token in p.stop_token_ids or (not p.ignore_eos and token in self.eos_token_ids):
            reason = "stop"
        delta = "" if reason else req.detok.add(token)
        if req.detok.stopped:
            reason = "stop"
        elif reason is None and (seq.num_output_tokens >= p.max_tokens or len(seq) >= self.token_limit):
            reason = "length"
        if req.sink is not None and delta:
            if not req.pending:
                self._unflushed.append(req)
            req.pending.append(delta)
        return reason

    @staticmethod
    def _prompt_score(seq: Sequence, logits: torch.Tensor,  # logits [V], hidden [H]
                      hidden: torch.Tensor) -> tuple[dict[str, float] | None, torch.Tensor | None]:
        if not seq.score_ids:
            return None, None
        probs = torch.softmax(logits.float(), dim=-1)
        return {"next_token_p": float(probs[list(seq.score_ids)].sum())}, hidden.detach().float().cpu().clone()

    def _finish(self, seq: Sequence, reason: str, extra: dict[str, float] | None = None,
                hidden: torch.Tensor | None = None) -> RequestOutput | None:
        req = self.requests.get(seq.request_id)
        if req is None or req.seq is not seq or req.output is not None:
            return None  # already finished (an abort frees it when the step ends)
        spec = None if self._spec is None else self._spec.request_metrics(seq)
        extra = {**(spec or {}), **(extra or {})} or None
        self._release(req)
        req.flush()
        return req.finish(reason, extra, hidden=hidden)

    def is_running(self, request_id: str) -> bool:
        """True while the request is admitted and unfinished (queued, prefilling or decoding)."""
        req = self.requests.get(request_id)
        return req is not None and req.output is None

    # ---- blocking API: thin wrappers over the step loop --------------------------------
    def generate(self, prompts: list[str] | list[list[int]] | str,
                 params: SamplingParams | list[SamplingParams] | None = None) -> list[RequestOutput]:
        if isinstance(prompts, str) or (isinstance(prompts, list) and prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        if not isinstance(prompts, list) or not prompts:
            raise ValueError("prompts must be a non-empty list of strings or of token-id lists")
        plist = params if isinstance(params, list) else [params] * len(prompts)
        if len(plist) != len(prompts):
            raise ValueError(f"{len(plist)} SamplingParams for {len(prompts)} prompts")
        checked = [self._checked(pr, pa) for pr, pa in zip(prompts, plist)]  # all valid before any runs
        results: dict[str, RequestOutput] = {}

        def sink(_delta: str, final: RequestOutput | None) -> None:
            if final is not None:
                results[final.request_id] = final

        rids = [self._admit(ids, pa, None, sink) for ids, pa in checked]
        try:
            while any(r not in results for r in rids):
                self.step()
        except BaseException:  # an interrupted or failed call leaves nothing behind
            for r in rids:
                self.abort(r)
            raise
        return [results[r] for r in rids]

    def chat(self, conversations: list[list[dict[str, Any]]],
             params: SamplingParams | list[SamplingParams] | None = None) -> list[RequestOutput]:
        if not isinstance(conversations, list) or not conversations or not isinstance(conversations[0], list):
            raise ValueError("chat takes a list of conversations (each a list of messages)")
        return self.generate([self.encode_chat(c) for c in conversations], params)

    def warmup(self, messages: list[dict[str, Any]] | None = None) -> float:
        """Pay the one-time costs before a user waits on them; -> the seconds it took.

        One short greedy chat runs through the step loop: the speculator is built (its draft
        head dequantizes the LM head), the C++ kernels are loaded (compiled on a machine's
        first use), the first passes allocate. Measured on a 2-core Zen 1, voice defaults: a
        60-token chat's first token took 954 ms in a fresh engine, 118-135 ms after that.
        `messages` (e.g. a session's system prompt) are the chat: their full blocks stay
        prefix-cached. Blocking: call it off the event loop, never from the engine thread."""
        if threading.current_thread() is self._worker:
            raise RuntimeError("warmup steps the engine: not from the engine thread")
        t0 = time.perf_counter()
        self.chat([messages or [{"role": "user", "content": "Hello."}]],
                  SamplingParams(max_tokens=4, temperature=0.0))
        return time.perf_counter() - t0

    def encode_chat(self, messages: list[dict[str, Any]]) -> list[int]:
        if not messages:
            raise ValueError("empty conversation")
        return self.tokenizer.encode_chat(messages)

    # ---- async streaming (the engine thread) ------------------------------------------
    def stream_chat(self, messages: list[dict[str, Any]], params: SamplingParams | None = None,
                    request_id: str | None = None) -> ChatStream:
        """A ChatStream of text deltas (llm_engine.streaming); bad input raises ValueError here.
        Admission is a queue put: the calling (event-loop) thread never waits for the engine
        lock. `.output` holds the final RequestOutput once the stream has ended."""
        ids, params = self._checked(self.encode_chat(messages), params)
        rid = request_id if request_id is not None else self._new_id()

        def start(sink: Sink) -> str:
            self._admit(ids, params, rid, sink)
            self.ensure_worker()
            return rid

        return ChatStream(rid, start, self.abort)

    def ensure_worker(self) -> None:
        """Start the engine thread if it is not running (it exits after 30 s idle, or at close)."""
        with self._admit_lock:
            if not self._closed and (self._worker is None or not self._worker.is_alive()):
                self._worker = threading.Thread(target=self._worker_loop, name="llm-engine", daemon=True)
                self._worker.start()

    def _worker_loop(self) -> None:
        lead = ExitStack()  # the lead's hold, kept from a reply's first step to its LEAD_TOKENS-th
        try:
            while True:
                self._wake.clear()
                leading = self._lead(lead)
                if self._closed:
                    return  # close() ends what is left once this thread is gone
                if not self.has_unfinished() and self._inbox.empty():
                    if not self._wake.wait(timeout=30.0):
                        with self._admit_lock:
                            if self._inbox.empty() and not self.requests:
                                self._worker = None
                                return  # idle: the next request starts a fresh worker
                    continue
                if self.core_gate is not None:
                    self.core_gate.wait()  # a stage that borrowed the cores (parley.cores) goes first
                try:
                    with thread_budget(self.lead_threads) if leading else nullcontext():
                        self.step()
                except Exception as exc:  # any failure must end the streams, not hang them
                    self._fail_all(exc)
                time.sleep(0)  # let a generate() caller take the lock between steps
        finally:
            lead.close()
            self._lead_held = False

    def _lead(self, lead: ExitStack) -> bool:
        """Borrow the cores while a reply the user waits for has fewer than LEAD_TOKENS tokens
        out (not a prefill ahead, not a turn-detector score): take the lead gate's hold when
        the STT is idle and keep it, step after step, until no reply needs it (`lead` holds
        it). -> whether the next step leads. A hold per step let the pause decode's word
        alignment start in the gap between two steps, and run beside the first chunk's
        synthesis. Measured on a 2-core Zen 1, idle, int8: a reply's first token 74 -> 42 ms
        after the prefill ahead at 2 threads, its 6th 153 -> 97 ms
        (pipeline.config.SessionConfig.llm_lead_threads)."""
        want = self.lead_gate is not None and self.lead_threads > 1 and any(
            not r.seq.prefill_only and r.output is None and r.num_emitted < LEAD_TOKENS
            for r in list(self.requests.values()))
        if not want:
            lead.close()
            self._lead_held = False
        elif not self._lead_held:
            self._lead_held = lead.enter_context(self.lead_gate.hold_if_idle())  # not beside a decode
            if not self._lead_held:
                lead.close()
        return self._lead_held

    def _fail_all(self, exc: Exception) -> None:
        """A step raised in the engine thread: every live request ends with finish_reason
        "error" (a ChatStream raises ParleyError) and gives its blocks back; the engine stays
        usable for new requests."""
        log.exception("engine step failed; failing %d request(s)", len(self.requests))
        self._end_all(f"{type(exc).__name__}: {exc}")

    def _end_all(self, error: str) -> None:
        with self._lock:
            self._drain_inbox()
            self._drain_aborts()
            for req in list(self.requests.values()):
                self._release(req)
                req.finish("error", error=error)

    def close(self) -> None:
        """Stop serving, for a clean shutdown: new requests raise EngineClosedError, the engine
        thread ends after the step it is in (not interrupted mid-step), and every request still
        queued or running ends with finish_reason "error" (its ChatStream raises ParleyError)
        and gives its blocks back. Idempotent; not from inside a sink (the engine thread)."""
        with self._admit_lock:
            self._closed = True
            worker = self._worker
        if worker is threading.current_thread():
            raise RuntimeError("close() waits for the engine thread: not from a sink")
        self._wake.set()
        if worker is not None:
            worker.join()
        self._end_all("the LLM engine was closed")
