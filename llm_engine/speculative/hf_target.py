"""A `Target` over a Hugging Face transformers causal LM (reference target and benchmark
baseline; transformers is imported by the caller, never by the engine). One DynamicCache per
sequence; rollback is DynamicCache.crop. Features are captured as the input of the final norm."""

from __future__ import annotations

import torch


class HFTarget:
    def __init__(self, model) -> None:
        self.model = model.eval()
        self.vocab_size = model.config.vocab_size
        self._caches: dict[str, object] = {}
        self._lens: dict[str, int] = {}
        self._feat: list[torch.Tensor] = []
        model.model.norm.register_forward_hook(lambda m, i, o: self._feat.append(i[0]))

    def embed_weight(self) -> torch.Tensor:
        return self.model.model.embed_tokens.weight

    def norm(self) -> tuple[torch.Tensor, float]:
        return self.model.model.norm.weight, self.model.config.rms_norm_eps

    def lm_head_weight(self) -> torch.Tensor:
        return self.model.lm_head.weight

    @torch.inference_mode()
    def extend(self, seq_id: str, token_ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        from transformers import DynamicCache

        cache = self._caches.setdefault(seq_id, DynamicCache())
        past = self._lens.get(seq_id, 0)
        ids = torch.tensor([token_ids])
        pos = torch.arange(past, past + len(token_ids))[None]
        self._feat.clear()
        out = self.model(input_ids=ids, past_key_values=cache, use_cache=True, position_ids=pos,
                         cache_position=pos[0])
        self._lens[seq_id] = past + len(token_ids)
        return self._feat[-1][0], out.logits[0].float()  # [T, D], [T, V]

    def truncate(self, seq_id: str, length: int) -> None:
        if self._lens.get(seq_id, 0) > length:
            # transformers >= 5 crops by a negative count of tokens to remove
            self._caches[seq_id].crop(length - self._lens[seq_id])
            self._lens[seq_id] = length

    def release(self, seq_id: str) -> None:
        self._caches.pop(seq_id, None)
        self._lens.pop(seq_id, None)

    def length(self, seq_id: str) -> int:
        return self._lens.get(seq_id, 0)


def load_embedded_hf():
    """(tokenizer, model): the embedded SmolLM2-135M-Instruct through transformers' own GGUF
    loader (fp32) — the reference target of the tests. transformers is test-only here."""
    from pathlib import Path

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from parley.assets import model_path

    path = Path(model_path("smollm2-135m-instruct"))
    tok = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    return tok, model.eval()

