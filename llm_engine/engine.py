"""LLMEngine: the public entry point (generate, chat, stream_chat, abort) over one step loop."""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path
from typing import Any

import torch

from llm_engine.block_manager import BlockManager
from llm_engine.config import EngineConfig
from llm_engine.detokenizer import IncrementalDetokenizer
from llm_engine.kv_cache import KVCache
from llm_engine.loader import load_model
from llm_engine.model import LlamaModel
from llm_engine.model_runner import ModelRunner
from llm_engine.outputs import RequestOutput
from llm_engine.request import Request, Sink
from llm_engine.sampler import Sampler
from llm_engine.sampling_params import SamplingParams
from llm_engine.scheduler import Scheduler
from llm_engine.sequence import Sequence, SequenceStatus
from llm_engine.streaming import stream_chat
from llm_engine.tokenizer import Tokenizer

DEFAULT_MODEL = "smollm2-135m-instruct"


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
        self.scheduler = Scheduler(self.bm, config.max_num_seqs, config.max_num_batched_tokens)
        graphs = None
        if self.device.type == "cuda" and not config.enforce_eager:
            from llm_engine.cuda_graph import CudaGraphRunner

            graphs = CudaGraphRunner(model, self.kv, config.cuda_graph_batch_sizes,
                                     -(-self.max_model_len // config.block_size))
        self.runner = ModelRunner(model, self.kv, self.bm, self.device, graphs)
        self.sampler = Sampler()
        self.eos_token_ids = frozenset(mcfg.eos_token_ids) | frozenset(tokenizer.eos_token_ids)
        self.requests: dict[str, Request] = {}
        self.speculative = None  # SpeculativeConfig: set by from_pretrained(speculative=...)
        self.spec_metrics = None  # aggregate SpecMetrics of the last speculative generate()
        self._lock = threading.RLock()
        self._work = threading.Condition(self._lock)
        self._pending_aborts: list[str] = []
        self._worker: threading.Thread | None = None
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

    # ---- requests -----------------------------------------------------------------
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

    def add_request(self, prompt: str | list[int], params: SamplingParams | None = None,
                    request_id: str | None = None, sink: Sink | None = None) -> str:
        params = params or SamplingParams()
        if not isinstance(params, SamplingParams):
            raise ValueError(f"params must be SamplingParams, got {type(params).__name__}")
        ids = self._prompt_ids(prompt)
        limit = self.token_limit
        if len(ids) >= limit:
            raise ValueError(f"prompt has {len(ids)} tokens; the limit is {limit - 1} "
                             f"(context {self.max_model_len}, cache {self.bm.block_size * len(self.bm.blocks)})")
        with self._lock:
            rid = request_id if request_id is not None else f"req-{next(self._ids)}"
            if rid in self.requests:
                raise ValueError(f"request id {rid!r} is already running")
            seq = Sequence(rid, ids, params)
            detok = IncrementalDetokenizer(self.tokenizer, params.stop, params.skip_special_tokens,
                                           params.include_stop_str_in_output)
            self.requests[rid] = Request(seq, detok, sink)
            self.scheduler.add(seq)
            self._work.notify_all()
        return rid

    @property
    def token_limit(self) -> int:
        return min(self.max_model_len, self.bm.block_size * len(self.bm.blocks))

    def abort(self, request_id: str) -> bool:
        """Stop a request now and free its blocks. Never waits on a running model step: if
        one is in flight the blocks are freed as soon as it returns. False if unknown."""
        if self._lock.acquire(blocking=False):
            try:
                return self._abort_locked(request_id)
            finally:
                self._lock.release()
        req = self.requests.get(request_id)
        if req is None or req.output is not None:
            return False
        self._pending_aborts.append(request_id)
        req.finish("abort")  # end the stream at once; the blocks go when the step returns
        return True

    def _abort_locked(self, request_id: str) -> bool:
        req = self.requests.pop(request_id, None)
        if req is None:
            return False
        self.scheduler.remove(req.seq)
        req.seq.status = SequenceStatus.FINISHED
        self.sampler.release(request_id)
        req.finish("abort")
        return True

    # ---- the step loop ------------------------------------------------------------
    def has_unfinished(self) -> bool:
        return self.scheduler.has_work()

    def step(self) -> list[RequestOutput]:
        """One scheduler step: run the model once on the scheduled batch; return what finished."""
        with self._lock:
            while self._pending_aborts:
                self._abort_locked(self._pending_aborts.pop())
            batch = self.scheduler.schedule()
            if not batch:
                return []
            out = self.runner.run(batch)
            for seq, n in zip(batch.seqs, batch.num_tokens):
                seq.num_computed_tokens += n
                self.bm.commit_full_blocks(seq)
            seqs = [batch.seqs[i] for i in out.sample_rows]
            tokens = self.sampler.sample(out.logits, [(s.request_id, s.params, s.token_ids) for s in seqs])
            return [o for s, t in zip(seqs, tokens) if (o := self._append(s, t)) is not None]

    def _append(self, seq: Sequence, token: int) -> RequestOutput | None:
        req = self.requests[seq.request_id]
        if req.output is not None:
            return None  # aborted while this step ran
        if req.t_first_token is None:
            req.t_first_token = time.perf_counter()
        seq.token_ids.append(token)
        p = seq.params
        reason = None
        if token in p.stop_token_ids or (not p.ignore_eos and token in self.eos_token_ids):
            reason = "stop"
        delta = "" if reason else req.detok.add(token)
        if req.detok.stopped:
            reason = "stop"
        elif reason is None and (seq.num_output_tokens >= p.max_tokens or len(seq) >= self.token_limit):
            reason = "length"
        if reason is None:
            if req.sink is not None and delta:
                req.sink(delta, None)
            return None
        if req.sink is not None and delta:
            req.sink(delta, None)
        self.scheduler.remove(seq)
        seq.status = SequenceStatus.FINISHED
        del self.requests[seq.request_id]
        self.sampler.release(seq.request_id)
        return req.finish(reason)

    # ---- blocking API -------------------------------------------------------------
    def generate(self, prompts: list[str] | list[list[int]] | str,
                 params: SamplingParams | list[SamplingParams] | None = None) -> list[RequestOutput]:
        if isinstance(prompts, str) or (isinstance(prompts, list) and prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        if not isinstance(prompts, list) or not prompts:
            raise ValueError("prompts must be a non-empty list of strings or of token-id lists")
        plist = params if isinstance(params, list) else [params] * len(prompts)
        if len(plist) != len(prompts):
            raise ValueError(f"{len(plist)} SamplingParams for {len(prompts)} prompts")
        spec = getattr(self, "speculative", None)
        if spec is not None:
            from llm_engine.speculative.engine_generate import generate_speculative, speculation_applies

            temps = {p.temperature for p in plist if p is not None}
            if all(p is not None and speculation_applies(p) for p in plist) and len(temps) == 1:
                with self._lock:
                    outs, self.spec_metrics = generate_speculative(
                        self, spec, [self._prompt_ids(p) for p in prompts], plist)
                return outs
        results: dict[str, RequestOutput] = {}

        def sink(_delta: str, final: RequestOutput | None) -> None:
            if final is not None:
                results[final.request_id] = final

        rids = [self.add_request(pr, pa, sink=sink) for pr, pa in zip(prompts, plist)]
        while any(r not in results for r in rids):
            self.step()
        return [results[r] for r in rids]

    def chat(self, conversations: list[list[dict[str, Any]]],
             params: SamplingParams | list[SamplingParams] | None = None) -> list[RequestOutput]:
        if not isinstance(conversations, list) or not conversations or not isinstance(conversations[0], list):
            raise ValueError("chat takes a list of conversations (each a list of messages)")
        return self.generate([self.encode_chat(c) for c in conversations], params)

    def encode_chat(self, messages: list[dict[str, Any]]) -> list[int]:
        if not messages:
            raise ValueError("empty conversation")
        return self.tokenizer.encode_chat(messages)

    # ---- async streaming (worker thread) ------------------------------------------
    def stream_chat(self, messages, params: SamplingParams | None = None, request_id: str | None = None):
        """Async generator of text deltas; see llm_engine.streaming."""
        return stream_chat(self, messages, params, request_id)

    def ensure_worker(self) -> None:
        with self._lock:
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._worker_loop, name="llm-engine", daemon=True)
                self._worker.start()

    def _worker_loop(self) -> None:
        while True:
            with self._work:
                if not self.scheduler.has_work() and not self._pending_aborts:
                    if not self._work.wait(timeout=30.0):
                        self._worker = None
                        return  # idle: the next stream starts a fresh worker
                    continue
                self.step()
            time.sleep(0)  # let abort()/add_request() threads take the lock between steps
