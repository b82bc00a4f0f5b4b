"""What a finished (or aborted) request returns."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    token_ids: list[int]  # generated tokens only
    text: str
    # "stop" | "length" | "abort" | "prefill" (engine.prefill done) | "error" (see `error`)
    finish_reason: str | None
    num_cached_tokens: int = 0  # prompt tokens served from the prefix cache
    # ttft_s, total_s; with speculation also drafted, accepted, passes, tokens_per_pass;
    # next_token_p for engine.next_token_probability()
    metrics: dict[str, float] = field(default_factory=dict)
    error: str | None = None  # finish_reason "error": what failed in the engine thread
    # engine.score_prompt(): the final (normed) hidden state at the prompt's last token, [H] fp32 CPU
    hidden: torch.Tensor | None = None


@dataclass(frozen=True)
class PromptScore:
    """engine.score_prompt(): what one prefill-only request says about a prompt's end."""

    next_token_p: float  # P(the next token is one of the asked ids)
    hidden: torch.Tensor  # [H] fp32 CPU: the final (normed) hidden state at the prompt's last token
