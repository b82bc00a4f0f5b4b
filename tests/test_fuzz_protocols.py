"""Property-based fuzzing (hypothesis) of the two network protocols, loopback only and bounded
(a few seconds each): `parley serve`'s HTTP API answers every body, method and path with a JSON
error (4xx), never a 500 or a dropped connection, and keeps serving; the talk websocket closes
a connection that sends garbage with one of the protocol's own codes (never 1011, an internal
failure), and another client's session goes on."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llm_engine import LLMEngine
from llm_engine.server import ServerConfig, ServerThread
from pipeline.talk import TalkConfig, TalkServer
from pipeline.talk import protocol as P
from tests.fake_session import FakeSessionFactory
from tests.talk_client import close_of, open_client

pytestmark = [pytest.mark.integration]
MODEL = "smollm2-135m-instruct"
FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)

json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-2**40, 2**40), st.floats(allow_nan=True),
                      st.text(max_size=30))
json_any = st.recursive(json_leaf, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
                        max_leaves=10)
message = st.fixed_dictionaries({}, optional={"role": st.sampled_from(["user", "system", "assistant", "tool", ""]) | json_leaf,
                                              "content": st.text(max_size=40) | json_any})
# max_tokens is always there and tiny (or invalid): a valid request generates a token or two
body = st.fixed_dictionaries(
    {"max_tokens": st.integers(-3, 3) | st.text(max_size=5) | st.floats() | st.booleans()},
    optional={"model": st.sampled_from([MODEL, "other"]) | json_leaf, "messages": st.lists(message, max_size=3) | json_any,
              "prompt": st.text(max_size=40) | json_any, "stream": st.booleans() | json_leaf,
              "temperature": json_leaf, "top_p": json_leaf, "stop": json_any, "n": json_leaf, "seed": json_leaf,
              "stream_options": json_any, "extra": json_any})


@pytest.fixture(scope="module")
def server():
    engine = LLMEngine.from_pretrained(max_num_seqs=4, num_threads=1)
    srv = ServerThread(engine, ServerConfig(port=0, model_name=MODEL)).start()
    yield srv
    srv.stop()


def _request(srv, method: str, path: str, data: bytes | None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
    try:
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def _check(status: int, payload: bytes) -> None:
    assert status < 500, (status, payload[:300])
    if status >= 400:
        assert isinstance(json.loads(payload)["error"]["message"], str), payload[:300]


@FUZZ
@given(path=st.sampled_from(["/v1/chat/completions", "/v1/completions"]), doc=body)
def test_http_json_bodies_get_an_answer_or_a_json_error(server, path, doc):
    status, payload = _request(server, "POST", path, json.dumps(doc).encode())
    _check(status, payload)


@FUZZ
@given(method=st.sampled_from(["GET", "POST", "PUT", "DELETE"]),
       path=st.sampled_from(["/v1/chat/completions", "/v1/completions", "/v1/models", "/v1/models/x", "/health",
                             "/v1/nothing"]) | st.text("abc/%?=.", min_size=1, max_size=20).map(lambda s: "/" + s),
       raw=st.binary(max_size=200) | st.none())
def test_http_raw_bytes_methods_and_paths_never_crash_the_server(server, method, path, raw):
    status, payload = _request(server, method, path, raw)
    assert status < 500, (method, path, raw, status, payload[:200])


def test_the_server_still_serves_after_the_fuzz(server):
    status, payload = _request(server, "POST", "/v1/chat/completions", json.dumps(
        {"model": MODEL, "max_tokens": 3, "messages": [{"role": "user", "content": "Hi"}]}).encode())
    assert status == 200 and json.loads(payload)["choices"][0]["message"]["content"], payload
    assert _request(server, "GET", "/health", None)[0] == 200


ws_message = st.one_of(st.binary(max_size=700), st.text(max_size=300),
                       json_any.map(json.dumps), st.dictionaries(st.sampled_from(["type", "sample_rate", "encoding",
                                                                                  "channels", "x"]), json_leaf).map(json.dumps))
PROTOCOL_CODES = {P.CLOSE_BAD_MESSAGE, P.CLOSE_TOO_BIG, P.CLOSE_UNSUPPORTED_FORMAT, P.CLOSE_AUDIO_FLOOD}


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(msgs=st.lists(ws_message, min_size=1, max_size=5), after_hello=st.booleans())
def test_talk_websocket_garbage_closes_that_connection_with_a_protocol_code(msgs, after_hello):
    asyncio.run(_talk_fuzz(msgs, after_hello))


async def _talk_fuzz(msgs: list, after_hello: bool) -> None:
    factory = FakeSessionFactory()
    async with TalkServer(TalkConfig(port=0), factory) as server:
        good, _ = await open_client(server.port)
        bad, _ = await open_client(server.port, hello=None)
        if after_hello:
            await bad.send(json.dumps({"type": "hello", "sample_rate": 16_000, "encoding": "pcm_s16le", "channels": 1}))
        from websockets.exceptions import ConnectionClosed

        try:
            for m in msgs:
                await bad.send(m)
        except ConnectionClosed:
            pass
        code, reason = None, ""
        with contextlib.suppress(TimeoutError):  # still open: everything it sent was valid
            code, reason = await close_of(bad, wait_s=0.5)
        # still open (None): all it sent was valid, e.g. even-length audio; else a protocol code
        assert code in PROTOCOL_CODES | {None, 1000, P.CLOSE_HELLO_TIMEOUT}, (code, reason, msgs)
        assert code != P.CLOSE_INTERNAL
        await good.send(b"\0\0" * 320)  # the other session is untouched
        assert server.active_sessions >= 1 and not good.close_code
        await good.close()
        await bad.close()
