"""Drafting with the trained EAGLE head (see head.py) for the embedded SmolLM2-135M."""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from torch import nn

from llm_engine.linear import Linear
from llm_engine.quant import Int8Linear
from llm_engine.speculative.drafter import Draft, Drafter
from llm_engine.speculative.head import EagleHead, HeadCache, HeadConfig

WEIGHTS = Path(__file__).parent / "weights" / "smollm2-135m-eagle.safetensors"
WEIGHT_DTYPES = (torch.float32, torch.bfloat16, torch.int8)  # the head's weight storage


def load_head(path: Path = WEIGHTS, cfg: HeadConfig | None = None) -> EagleHead:
    from safetensors.torch import load_file

    if not path.exists():
        raise FileNotFoundError(f"EAGLE head weights not found: {path}")
    weights = load_file(str(path))
    if cfg is None:  # the draft vocabulary's size is the one shape the file decides
        cfg = HeadConfig(draft_vocab_size=len(weights.get("draft_vocab", ())))
    head = EagleHead(cfg)
    head.load_state_dict(weights)
    return head.eval()


class _SeqState:
    def __init__(self) -> None:
        self.cache = HeadCache()
        self.feats: list[torch.Tensor] = []  # target features not yet fed to the head, in order


def _with_linears(head: EagleHead, dtype: torch.dtype) -> EagleHead:
    """A copy of head whose linears store their weights in dtype (the caller's head untouched)."""
    head = copy.deepcopy(head)
    for name, mod in list(head.named_children()):
        if isinstance(mod, nn.Linear):
            setattr(head, name, _stored(mod, dtype))
    return head


def _stored(lin: nn.Linear, dtype: torch.dtype) -> nn.Module:
    if dtype == torch.int8:
        return Int8Linear(lin)
    return lin if lin.weight.dtype == dtype else Linear.converted(lin, dtype)


class HeadDrafter(Drafter):
    """embed [V, D], lm_head [V, D], norm weight [D] are the target's own tensors (any dtype:
    the head runs on fp32 activations over copies of the rows it needs). weight_dtype: the
    head's and draft LM head's weight storage. A draft token streams them all from DRAM (each
    target pass evicts them): fp32 15.6 MB of layer + 8.8 MB of draft LM head, bf16 half, int8
    (the default: the engine's int8 format, per-row scales, exact int32 sums) a quarter. A
    draft of 1 token took 3.1 ms in bf16 and 1.9 ms in int8 while an int8 target decoded
    (model 167 Xeon, 1 thread, medians), yet streaming decode with "auto" gained only 1.02x
    on an int8 target and 1.01x on q4 over the bf16 head (`python -m benchmarks.cpu_layer_stack`,
    side by side): the int8 head keeps slightly fewer drafts. Drafts change no output, only
    how often they are accepted."""

    name = "head"

    def __init__(self, head: EagleHead, embed: torch.Tensor, lm_head: torch.Tensor,
                 norm_weight: torch.Tensor, eps: float, temperature: float = 0.0, seed: int = 0,
                 weight_dtype: torch.dtype = torch.int8) -> None:
        if weight_dtype not in WEIGHT_DTYPES:
            raise ValueError(f"weight_dtype must be one of {WEIGHT_DTYPES}, got {weight_dtype}")
        self.head, self.embed = _with_linears(head, weight_dtype), embed
        self.vocab_size = lm_head.shape[0]
        vocab = head.draft_vocab if len(head.draft_vocab) else None  # [Vd] target ids
        self.vocab = vocab
        # [Vd, D]: only the draft vocabulary's LM-head rows (4,096 of 49,152: 12x less per token)
        rows = (lm_head if vocab is None else lm_head[vocab]).detach().float()
        lm_sub = Linear(rows.shape[1], rows.shape[0], bias=False)
        lm_sub.weight = torch.nn.Parameter(rows.contiguous(), requires_grad=False)
        self.lm_sub = _stored(lm_sub, weight_dtype)
        self.norm_weight, self.eps = norm_weight.detach().float(), eps
        self.temperature = temperature
        self.gen = torch.Generator().manual_seed(seed)
        self._seqs: dict[str, _SeqState] = {}

    def accepted(self, seq_id: str, context_token_ids: list[int], **target_outputs) -> None:
        st = self._seqs.setdefault(seq_id, _SeqState())
        st.feats.append(target_outputs["features"])  # [n, D] for the newly verified positions

    def _normed(self, f: torch.Tensor) -> torch.Tensor:  # target pre-norm [m, D] -> head space g
        f = f.float()
        return f * torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + self.eps) * self.norm_weight

    def _pick(self, g: torch.Tensor) -> tuple[int, torch.Tensor | None]:
        """g [D] -> (target token id, [V] proposal distribution when sampling)."""
        logits = self.lm_sub(g[None])[0]  # [Vd]
        if self.temperature <= 0:
            j = int(logits.argmax())
            return (j if self.vocab is None else int(self.vocab[j])), None
        p = torch.softmax(logits / self.temperature, -1)
        j = int(torch.multinomial(p, 1, generator=self.gen))
        if self.vocab is None:
            return j, p
        full = torch.zeros(self.vocab_size, dtype=p.dtype)
        full[self.vocab] = p  # q is 0 outside the draft vocabulary: the acceptance rule stays exact
        return int(self.vocab[j]), full

    def _ready(self, seq_id: str, ctx: list[int]) -> _SeqState | None:
        """Feed the head the verified features it has not seen; None before the first ones."""
        st = self._seqs.get(seq_id)
        if st is None or (not st.feats and len(st.cache) == 0):
            return None
        if st.feats:
            f = self._normed(torch.cat(st.feats))  # [m, D] features of positions start .. len(ctx)-2
            st.feats = []
            m = f.shape[0]
            # start > rows only after a prefix-cache hit (no features for the cached prompt
            # part): the head then attends over the computed suffix only
            start = len(ctx) - 1 - m
            nxt = torch.tensor(ctx[start + 1 : start + 1 + m])
            out = self.head(f, self.embed[nxt].float(), torch.arange(start, start + m), st.cache)
            st.cache.feature = out[-1]
        return st

    def _advance(self, f_hat: torch.Tensor, tok: int, pos: int, cache: HeadCache) -> torch.Tensor:
        """The head's predicted feature after drafting tok at position pos + 1: [D] -> [D]."""
        return self.head(f_hat[None], self.embed[tok][None].float(), torch.tensor([pos]), cache)[0]

    @torch.inference_mode()
    def propose(self, seq_id: str, context_token_ids: list[int], k: int) -> Draft:
        st = self._ready(seq_id, context_token_ids) if k > 0 else None
        if st is None:
            return Draft([])
        real = len(st.cache)
        f_hat = st.cache.feature
        pos0 = len(context_token_ids) - 1
        ids, probs = [], []
        for i in range(k):
            tok, p = self._pick(f_hat)
            ids.append(tok)
            if p is not None:
                probs.append(p)
            if i + 1 < k:
                f_hat = self._advance(f_hat, tok, pos0 + i, st.cache)
        st.cache.truncate(real)  # rows from predicted features are never kept
        return Draft(ids, torch.stack(probs) if probs else None)

    @torch.inference_mode()
    def children(self, seq_id: str, context_token_ids: list[int], path: tuple[int, ...],
                 width: int) -> list[tuple[int, float]]:
        """The head's `width` likeliest next tokens after it drafts `path` from the context's
        end, as (target id, log-probability over the draft vocabulary), likeliest first: one
        node's expansion in a draft tree (benchmarks/draft_trees.py measures tree shapes)."""
        st = self._ready(seq_id, context_token_ids)
        if st is None or width <= 0:
            return []
        real = len(st.cache)
        f_hat = st.cache.feature
        pos0 = len(context_token_ids) - 1
        for i, tok in enumerate(path):
            f_hat = self._advance(f_hat, tok, pos0 + i, st.cache)
        st.cache.truncate(real)
        logp = torch.log_softmax(self.lm_sub(f_hat[None])[0].float(), -1)  # [Vd]
        val, idx = logp.topk(min(width, logp.shape[0]))
        ids = idx if self.vocab is None else self.vocab[idx]
        return list(zip(ids.tolist(), val.tolist()))

    def release(self, seq_id: str) -> None:
        self._seqs.pop(seq_id, None)
