"""Tokenizer + chat template: from a Hugging Face directory or rebuilt from GGUF metadata."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers
from tokenizers import Tokenizer as HFTokenizer

CONTROL_TOKEN_TYPE = 3  # GGUF token_type for special/control tokens


def _raise(message: str) -> None:
    raise jinja2.TemplateError(message)


class Tokenizer:
    def __init__(self, tok: HFTokenizer, chat_template: str | None, bos_token: str | None,
                 eos_tokens: list[str], add_bos: bool) -> None:
        self._tok = tok
        self.bos_token = bos_token
        self.eos_tokens = eos_tokens
        self.add_bos = add_bos
        self.bos_token_id = tok.token_to_id(bos_token) if bos_token else None
        self.eos_token_ids = tuple(i for i in (tok.token_to_id(t) for t in eos_tokens) if i is not None)
        self.chat_template = chat_template
        self._template = None
        if chat_template:
            env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
            env.globals["raise_exception"] = _raise
            self._template = env.from_string(chat_template)

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        ids = self._tok.encode(text, add_special_tokens=add_special_tokens).ids
        if add_special_tokens and self.add_bos and self.bos_token_id is not None and (
            not ids or ids[0] != self.bos_token_id
        ):
            ids = [self.bos_token_id, *ids]
        return ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self._tok.decode(ids, skip_special_tokens=skip_special_tokens)

    def id_to_token(self, i: int) -> str | None:
        return self._tok.id_to_token(i)

    def render_chat(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True) -> str:
        if self._template is None:
            raise ValueError("this model has no chat template; use generate() with a plain prompt")
        for m in messages:
            if not isinstance(m, dict) or "role" not in m or "content" not in m:
                raise ValueError(f"each message needs 'role' and 'content', got {m!r}")
        return self._template.render(messages=messages, add_generation_prompt=add_generation_prompt,
                                     bos_token=self.bos_token or "",
                                     eos_token=self.eos_tokens[0] if self.eos_tokens else "")

    def encode_chat(self, messages: list[dict[str, Any]]) -> list[int]:
        # The template already carries any BOS it wants, as Hugging Face does.
        return self.encode(self.render_chat(messages), add_special_tokens=False)

    @classmethod
    def from_hf_dir(cls, path: Path) -> Tokenizer:
        tok_file = path / "tokenizer.json"
        if not tok_file.is_file():
            raise FileNotFoundError(f"{tok_file} is missing (a Hugging Face model dir needs tokenizer.json)")
        tok = HFTokenizer.from_file(str(tok_file))
        cfg_file = path / "tokenizer_config.json"
        cfg = json.loads(cfg_file.read_text()) if cfg_file.is_file() else {}
        template = cfg.get("chat_template")
        tmpl_file = path / "chat_template.jinja"
        if template is None and tmpl_file.is_file():
            template = tmpl_file.read_text()
        bos, eos = _token_str(cfg.get("bos_token")), _token_str(cfg.get("eos_token"))
        return cls(tok, template, bos, [eos] if eos else [], bool(cfg.get("add_bos_token", False)))

    @classmethod
    def from_gguf_fields(cls, meta: dict[str, Any]) -> Tokenizer:
        if meta.get("tokenizer.ggml.model") != "gpt2":
            raise ValueError(f"GGUF tokenizer model {meta.get('tokenizer.ggml.model')!r} unsupported; "
                             "supported: gpt2 (byte-level BPE)")
        tokens: list[str] = meta["tokenizer.ggml.tokens"]
        types: list[int] = meta.get("tokenizer.ggml.token_type", [1] * len(tokens))
        merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
        vocab = {t: i for i, t in enumerate(tokens)}
        unk = meta.get("tokenizer.ggml.unknown_token_id")
        tok = HFTokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False,
                                     unk_token=tokens[unk] if unk is not None else None))
        pre = [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
        if meta.get("tokenizer.ggml.pre") in ("smollm", "starcoder", "refact"):
            pre.insert(0, pre_tokenizers.Digits(individual_digits=True))
        elif meta.get("tokenizer.ggml.pre") == "llama-bpe":
            pre.insert(0, pre_tokenizers.Split(Regex(_LLAMA3_SPLIT), behavior="isolated"))
            pre[-1] = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
        tok.pre_tokenizer = pre_tokenizers.Sequence(pre)
        tok.decoder = decoders.ByteLevel()
        tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                                for t, ty in zip(tokens, types) if ty == CONTROL_TOKEN_TYPE])
        bos_id, eos_id = meta.get("tokenizer.ggml.bos_token_id"), meta.get("tokenizer.ggml.eos_token_id")
        eos = [tokens[eos_id]] if eos_id is not None else []
        if "<|im_end|>" in vocab and "<|im_end|>" not in eos:
            eos.append("<|im_end|>")  # ChatML models end a turn with it
        return cls(tok, meta.get("tokenizer.chat_template"), tokens[bos_id] if bos_id is not None else None,
                   eos, bool(meta.get("tokenizer.ggml.add_bos_token", False)))


_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def _token_str(t: Any) -> str | None:
    if isinstance(t, dict):
        return t.get("content")
    return t
