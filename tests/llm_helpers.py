"""Random-weight tiny Llama checkpoints saved as Hugging Face dirs, for the engine tests."""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, models, pre_tokenizers


def make_tiny_llama(path: Path, seed: int = 0, **overrides) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    kw = dict(vocab_size=384, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
              initializer_range=0.2,  # peaked logits: fp32 rounding never flips a greedy argmax
              tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
    kw.update(overrides)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(**kw)).eval()
    model.save_pretrained(path)
    vocab = {f"t{i}": i for i in range(kw["vocab_size"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(path / "tokenizer.json"))
    return model


def hf_greedy(model, prompt: list[int], n: int) -> list[int]:
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False,
                             eos_token_id=None, pad_token_id=0)
    return out[0, len(prompt):].tolist()
