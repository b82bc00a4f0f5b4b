"""The OpenAI wire format and the server's config, without a model: every bad field is a 400
naming it, the context window is checked before the engine sees the prompt."""

from __future__ import annotations

import pytest

from llm_engine.server import APIError, ServerConfig, is_loopback
from llm_engine.server import protocol as p

pytestmark = pytest.mark.unit

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def err(kind: str, body) -> APIError:
    with pytest.raises(APIError) as e:
        p.parse_request(kind, body)
    assert e.value.status == 400
    return e.value


def test_a_valid_chat_request_parses_with_openai_defaults():
    r = p.parse_request("chat", {**CHAT, "stop": "\n", "seed": 3, "temperature": 0, "top_p": 0.5,
                                 "stream": True, "stream_options": {"include_usage": True}})
    assert r.messages == ({"role": "user", "content": "hi"},)
    assert r.sampling["stop"] == ("\n",) and r.sampling["seed"] == 3 and r.sampling["temperature"] == 0.0
    assert r.stream and r.include_usage and r.max_tokens is None
    assert p.parse_request("completion", {"model": "m", "prompt": "x"}).max_tokens == 16


def test_text_parts_and_developer_role_are_accepted():
    r = p.parse_request("chat", {"model": "m", "messages": [
        {"role": "developer", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]})
    assert r.messages == ({"role": "system", "content": "be brief"}, {"role": "user", "content": "ab"})


@pytest.mark.parametrize(("patch", "param"), [
    ({"model": None}, "model"),
    ({"messages": "hi"}, "messages"),
    ({"messages": [{"role": "user", "content": 3}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages[0].content"),
    ({"max_tokens": -1}, "max_tokens"),
    ({"max_tokens": True}, "max_tokens"),
    ({"max_completion_tokens": 0}, "max_completion_tokens"),
    ({"temperature": "hot"}, "temperature"),
    ({"temperature": float("nan")}, "temperature"),
    ({"top_p": 1.5}, "top_p"),
    ({"seed": 1.5}, "seed"),
    ({"stop": [""]}, "stop"),
    ({"stop": 5}, "stop"),
    ({"n": 3}, "n"),
    ({"stream": "yes"}, "stream"),
    ({"stream_options": {"include_usage": True}}, "stream_options"),
    ({"tools": [{"type": "function"}]}, "tools"),
    ({"logprobs": True}, "logprobs"),
    ({"ignore_eos": 1}, "ignore_eos"),
])
def test_each_bad_chat_field_is_named(patch, param):
    e = err("chat", {**CHAT, **patch})
    assert e.param == param and param in e.message
    assert e.body()["error"]["param"] == param and e.body()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize(("patch", "param"), [
    ({"prompt": ""}, "prompt"),
    ({"prompt": ["a", "b"]}, "prompt"),
    ({"prompt": [1, "x"]}, "prompt"),
    ({"echo": True}, "echo"),
    ({"best_of": 2}, "best_of"),
])
def test_each_bad_completion_field_is_named(patch, param):
    assert err("completion", {"model": "m", "prompt": "x", **patch}).param == param


def test_not_an_object_is_400():
    assert err("chat", ["not", "an", "object"]).param is None


def test_the_context_window_bounds_prompt_and_completion():
    chat = p.parse_request("chat", CHAT)
    assert p.resolve_max_tokens(chat, 100, 1000).max_tokens == 899  # the rest of the window
    with pytest.raises(APIError) as e:
        p.resolve_max_tokens(chat, 999, 1000)
    assert e.value.status == 400 and e.value.code == "context_length_exceeded" and e.value.param == "messages"
    capped = p.parse_request("chat", {**CHAT, "max_tokens": 50})
    assert p.resolve_max_tokens(capped, 100, 1000).max_tokens == 50
    with pytest.raises(APIError) as e:
        p.resolve_max_tokens(capped, 990, 1000)
    assert e.value.param == "max_tokens"


def test_backpressure_errors_are_retryable():
    assert APIError(429, "full").retryable and APIError(503, "draining").retryable
    assert not APIError(400, "bad").retryable


def test_chunks_carry_usage_null_until_the_usage_chunk():
    c = p.chunk("chat", "id", "m", 1, "Hi", None, include_usage=True)
    assert c["object"] == "chat.completion.chunk" and c["choices"][0]["delta"] == {"content": "Hi"}
    assert c["usage"] is None
    first = p.chunk("chat", "id", "m", 1, "", None, role=True)
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""} and "usage" not in first
    u = p.usage_chunk("chat", "id", "m", 1, p.usage(10, 5, 8))
    assert u["choices"] == [] and u["usage"]["total_tokens"] == 15
    assert u["usage"]["prompt_tokens_details"]["cached_tokens"] == 8
    assert p.chunk("completion", "id", "m", 1, "x", "stop")["choices"][0]["text"] == "x"


def test_loopback_and_the_api_key_rule():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.0.0.5") and not is_loopback("example.org")
    with pytest.raises(ValueError, match="requires an API key"):
        ServerConfig(host="0.0.0.0")
    assert ServerConfig(host="0.0.0.0", api_key="k").api_key == "k"
    for bad in ({"port": 70000}, {"max_queue": 0}, {"retry_after_s": 0}, {"api_key": " "},
                {"shutdown_timeout_s": -1}):
        with pytest.raises(ValueError):
            ServerConfig(**bad)
