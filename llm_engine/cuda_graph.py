"""CUDA-graph capture of the decode step for a set of batch sizes (CUDA only).

Decode of a small model at batch 1 is launch-bound on a GPU (~15 ops x 30 layers); one
graph replay replaces those launches. Graphs are captured at engine start, largest batch
first so they share one memory pool. A batch is padded up to the next captured size: pad
rows store nothing (slot -1) and attend to one position, and their outputs are dropped.
`EngineConfig(enforce_eager=True)` disables all of this. On an H200 it gives the eager greedy
tokens at every padded size (tests/test_kernels_engine.py, marked gpu) and made batch-1 decode of
a SmolLM2-135M-shaped model 12.5x faster (benchmarks/results/README.md).
"""

from __future__ import annotations

import torch

from llm_engine.attention_metadata import AttentionMetadata
from llm_engine.kv_cache import KVCache
from llm_engine.model import LlamaModel


class CudaGraphRunner:
    def __init__(self, model: LlamaModel, kv: KVCache, batch_sizes: tuple[int, ...], max_blocks: int) -> None:
        dev = next(model.parameters()).device
        if dev.type != "cuda":
            raise ValueError("CUDA graphs need the model on a CUDA device")
        self.model, self.kv, self.max_blocks = model, kv, max_blocks
        self.sizes = sorted(set(batch_sizes))
        n = self.sizes[-1]
        block_size = kv.layers[0][0].shape[1]
        self.max_context = max_blocks * block_size
        self.input_ids = torch.zeros(n, dtype=torch.long, device=dev)
        self.positions = torch.zeros(n, dtype=torch.long, device=dev)
        self.slots = torch.full((n,), -1, dtype=torch.long, device=dev)
        self.tables = torch.zeros(n, max_blocks, dtype=torch.int32, device=dev)
        self.ctx = torch.ones(n, dtype=torch.int32, device=dev)
        self.cu = torch.arange(n + 1, dtype=torch.int32, device=dev)
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.outputs: dict[int, torch.Tensor] = {}
        pool = torch.cuda.graph_pool_handle()
        for b in reversed(self.sizes):
            self._capture(b, pool)

    def _meta(self, b: int) -> AttentionMetadata:
        return AttentionMetadata(self.positions[:b], self.slots[:b], self.tables[:b], self.cu[: b + 1],
                                 self.ctx[:b], True, self.max_context)

    def _capture(self, b: int, pool) -> None:
        meta = self._meta(b)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):  # warm up (Triton compiles, cuBLAS picks its kernels)
                self.model(self.input_ids[:b], meta, self.kv.layers)
        torch.cuda.current_stream().wait_stream(stream)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, pool=pool):
            self.outputs[b] = self.model(self.input_ids[:b], meta, self.kv.layers)
        self.graphs[b] = g

    def can_run(self, meta: AttentionMetadata) -> bool:
        return meta.num_seqs <= self.sizes[-1] and meta.block_tables.shape[1] <= self.max_blocks

    def run(self, input_ids: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:  # [B, H]
        b = meta.num_seqs
        size = next(s for s in self.sizes if s >= b)
        mb = meta.block_tables.shape[1]
        self.input_ids[:b].copy_(input_ids)
        self.positions[:b].copy_(meta.positions)
        self.slots[:size].fill_(-1)
        self.slots[:b].copy_(meta.slot_mapping)
        self.tables[:b, :mb].copy_(meta.block_tables)
        self.ctx[:size].fill_(1)
        self.ctx[:b].copy_(meta.context_lens)
        self.graphs[size].replay()
        return self.outputs[size][:b]
