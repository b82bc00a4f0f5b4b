"""The OpenAI wire format: request validation (every bad field is a 400 that names it) and the
response, chunk and error bodies of /v1/chat/completions and /v1/completions."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from llm_engine.sampling_params import SamplingParams
from parley.errors import ParleyError

ROLES = ("system", "developer", "user", "assistant")
MAX_STOP = 4  # as OpenAI: up to 4 stop sequences


class APIError(ParleyError):
    """An error answered to the client as an OpenAI error body with an HTTP status."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None) -> None:
        super().__init__(message, retryable=status in (429, 503))
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def invalid(param: str, message: str) -> APIError:
    return APIError(400, f"{param}: {message}", param=param, code="invalid_value")


@dataclass(frozen=True)
class GenerationRequest:
    """One validated request: what to prompt with and how to sample (max_tokens resolved later,
    once the prompt's length is known)."""

    kind: str  # "chat" | "completion"
    model: str
    messages: tuple[dict[str, str], ...] | None  # chat
    prompt: str | tuple[int, ...] | None  # completion
    sampling: dict[str, Any]  # SamplingParams fields except max_tokens
    max_tokens: int | None  # None: the rest of the context window
    stream: bool
    include_usage: bool


def parse_request(kind: str, body: Any) -> GenerationRequest:
    if not isinstance(body, dict):
        raise APIError(400, "the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise invalid("model", "a model id (string) is required; see GET /v1/models")
    messages = prompt = None
    if kind == "chat":
        messages = _messages(body.get("messages"))
        for name in ("tools", "functions"):
            if body.get(name):
                raise invalid(name, "tool and function calling are not supported by this server")
        if body.get("logprobs"):
            raise invalid("logprobs", "logprobs are not supported by this server")
        mt = body.get("max_completion_tokens", body.get("max_tokens"))
        mt_name = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
    else:
        prompt = _prompt(body.get("prompt"))
        for name in ("echo", "suffix", "logprobs"):
            if body.get(name) not in (None, False):
                raise invalid(name, "is not supported by this server")
        if body.get("best_of") not in (None, 1):
            raise invalid("best_of", "only 1 is supported")
        mt, mt_name = body.get("max_tokens", 16), "max_tokens"  # OpenAI's completions default
    if body.get("n") not in (None, 1):
        raise invalid("n", "only n=1 is supported")
    if mt is not None and (not _is_int(mt) or mt < 1):
        raise invalid(mt_name, f"must be an integer >= 1, got {mt!r}")
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise invalid("stream", f"must be a boolean, got {stream!r}")
    opts = body.get("stream_options")
    if opts is not None and (not isinstance(opts, dict) or not stream):
        raise invalid("stream_options", "must be an object, and only with stream=true")
    include_usage = bool((opts or {}).get("include_usage", False))
    return GenerationRequest(kind, model, messages, prompt, _sampling(body), mt, stream, include_usage)


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _number(body: dict, name: str, default: float, lo: float, hi: float, lo_open: bool = False) -> float:
    x = body.get(name)
    if x is None:
        return default
    if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x):
        raise invalid(name, f"must be a number, got {x!r}")
    if x > hi or x < lo or (lo_open and x == lo):
        raise invalid(name, f"must be in {'(' if lo_open else '['}{lo}, {hi}], got {x!r}")
    return float(x)


def _sampling(body: dict) -> dict[str, Any]:
    out: dict[str, Any] = {
        "temperature": _number(body, "temperature", 1.0, 0.0, 2.0),
        "top_p": _number(body, "top_p", 1.0, 0.0, 1.0, lo_open=True),
    }
    seed = body.get("seed")
    if seed is not None and not _is_int(seed):
        raise invalid("seed", f"must be an integer, got {seed!r}")
    out["seed"] = seed
    stop = body.get("stop")
    if stop is None:
        stop = []
    elif isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or len(stop) > MAX_STOP or any(not isinstance(s, str) or not s for s in stop):
        raise invalid("stop", f"must be a non-empty string or a list of up to {MAX_STOP} of them, got {stop!r}")
    out["stop"] = tuple(stop)
    ignore_eos = body.get("ignore_eos", False)  # vLLM's extension: fixed-length replies for load tests
    if not isinstance(ignore_eos, bool):
        raise invalid("ignore_eos", f"must be a boolean, got {ignore_eos!r}")
    out["ignore_eos"] = ignore_eos
    return out


def _content(i: int, content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise invalid(f"messages[{i}].content", "only text parts ({'type': 'text', 'text': ...}) are supported")
            parts.append(part["text"])
        return "".join(parts)
    raise invalid(f"messages[{i}].content", f"must be a string or a list of text parts, got {type(content).__name__}")


def _messages(messages: Any) -> tuple[dict[str, str], ...]:
    if not isinstance(messages, list) or not messages:
        raise invalid("messages", "must be a non-empty list of {role, content} objects")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise invalid(f"messages[{i}]", "must be an object with role and content")
        role = m.get("role")
        if role not in ROLES:
            raise invalid(f"messages[{i}].role", f"must be one of {ROLES}, got {role!r}")
        content = m.get("content")
        if content is None and role == "assistant":
            content = ""
        out.append({"role": "system" if role == "developer" else role, "content": _content(i, content)})
    return tuple(out)


def _prompt(prompt: Any) -> str | tuple[int, ...]:
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str) and prompt:
        return prompt
    if isinstance(prompt, list) and prompt and all(_is_int(t) for t in prompt):
        return tuple(prompt)
    raise invalid("prompt", "must be a non-empty string or token-id list (one prompt per request)")


def resolve_max_tokens(req: GenerationRequest, num_prompt_tokens: int, token_limit: int) -> SamplingParams:
    """SamplingParams for a prompt of num_prompt_tokens; a prompt (plus max_tokens) over the
    context window is a 400, as OpenAI answers it, never a crash deeper in."""
    room = token_limit - 1 - num_prompt_tokens
    param = "messages" if req.kind == "chat" else "prompt"
    if room < 1:
        raise APIError(400, f"{param}: the prompt has {num_prompt_tokens} tokens; this model's context "
                       f"window holds {token_limit - 1} (prompt and completion together)",
                       param=param, code="context_length_exceeded")
    mt = req.max_tokens
    if mt is not None and mt > room:
        raise APIError(400, f"max_tokens: {mt} completion tokens + {num_prompt_tokens} prompt tokens exceed "
                       f"the context window of {token_limit - 1} tokens", param="max_tokens",
                       code="context_length_exceeded")
    return SamplingParams(max_tokens=mt or room, **req.sampling)


# ---- response bodies --------------------------------------------------------------------
def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> dict[str, Any]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens}}


def _envelope(kind: str, rid: str, model: str, created: int, stream: bool) -> dict[str, Any]:
    if kind == "chat":
        obj = "chat.completion.chunk" if stream else "chat.completion"
    else:
        obj = "text_completion"
    return {"id": rid, "object": obj, "created": created, "model": model}


def full_response(kind: str, rid: str, model: str, created: int, text: str, finish_reason: str,
                  usage_body: dict[str, Any]) -> dict[str, Any]:
    body = _envelope(kind, rid, model, created, stream=False)
    if kind == "chat":
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                  "finish_reason": finish_reason}
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
    body.update(choices=[choice], usage=usage_body)
    return body


def chunk(kind: str, rid: str, model: str, created: int, text: str | None, finish_reason: str | None,
          *, role: bool = False, include_usage: bool = False) -> dict[str, Any]:
    """One streamed choice chunk; text None is the final (empty) delta that carries finish_reason."""
    body = _envelope(kind, rid, model, created, stream=True)
    if kind == "chat":
        delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else {}
        if text is not None:
            delta["content"] = text
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
    else:
        choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish_reason}
    body["choices"] = [choice]
    if include_usage:
        body["usage"] = None  # OpenAI: null on every chunk but the last when include_usage is on
    return body


def usage_chunk(kind: str, rid: str, model: str, created: int, usage_body: dict[str, Any]) -> dict[str, Any]:
    body = _envelope(kind, rid, model, created, stream=True)
    body.update(choices=[], usage=usage_body)
    return body


def now() -> int:
    return int(time.time())
