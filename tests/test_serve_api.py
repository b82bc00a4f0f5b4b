"""`parley serve` through the official openai client: a real engine (the embedded SmolLM2)
behind a server on a free loopback port. Greedy replies are compared with the engine's own
in-process output, so the server is checked for what it says, not only for its shapes."""

from __future__ import annotations

import time

import openai
import pytest

from llm_engine import LLMEngine, SamplingParams
from llm_engine.server import ServerConfig, ServerThread
from llm_engine.server.metrics import free_blocks, total_blocks

pytestmark = pytest.mark.integration

KEY = "test-key"
MODEL = "smollm2-135m-instruct"
HELLO = [{"role": "user", "content": "Say hello to Ana in one short sentence."}]


@pytest.fixture(scope="module")
def engine():
    return LLMEngine.from_pretrained(max_num_seqs=8, num_threads=1)


@pytest.fixture(scope="module")
def server(engine):
    srv = ServerThread(engine, ServerConfig(port=0, api_key=KEY, model_name=MODEL)).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url, api_key=KEY, max_retries=0, timeout=60)


def wait_blocks_idle(engine, timeout_s: float = 10.0) -> int:
    t_end = time.monotonic() + timeout_s
    while time.monotonic() < t_end:
        if free_blocks(engine) == total_blocks(engine) and not engine.requests:
            break
        time.sleep(0.02)
    return free_blocks(engine)


def greedy(engine, messages, n: int) -> str:
    return engine.chat([messages], SamplingParams(max_tokens=n, temperature=0.0))[0].text


def test_models_lists_the_served_model(client, engine):
    models = client.models.list().data
    assert [m.id for m in models] == [MODEL]
    assert client.models.retrieve(MODEL).id == MODEL


def test_chat_non_streaming_matches_the_engine_and_counts_usage(client, engine):
    r = client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=8, temperature=0)
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content == greedy(engine, HELLO, 8)
    assert r.usage.prompt_tokens == len(engine.encode_chat(HELLO))
    assert r.usage.completion_tokens <= 8
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    if r.choices[0].finish_reason == "length":
        assert r.usage.completion_tokens == 8


def test_chat_streaming_with_usage_equals_non_streaming(client, engine):
    stream = client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=8, temperature=0,
                                            stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == greedy(engine, HELLO, 8)
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals in (["length"], ["stop"])
    assert chunks[-1].choices == [] and chunks[-1].usage is not None  # the usage chunk comes last
    assert all(c.usage is None for c in chunks[:-1])
    assert chunks[-1].usage.prompt_tokens == len(engine.encode_chat(HELLO))
    assert chunks[-1].usage.completion_tokens == 8 if finals == ["length"] else chunks[-1].usage.completion_tokens < 8


def test_completions_streaming_and_not_match_the_engine(client, engine):
    prompt = "The capital of France is"
    want = engine.generate(prompt, SamplingParams(max_tokens=6, temperature=0.0))[0]
    r = client.completions.create(model=MODEL, prompt=prompt, max_tokens=6, temperature=0)
    assert r.choices[0].text == want.text
    assert r.usage.prompt_tokens == len(want.prompt_token_ids)
    assert r.usage.completion_tokens == len(want.token_ids)
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model=MODEL, prompt=prompt, max_tokens=6, temperature=0, stream=True))
    assert streamed == want.text


def test_stop_sequence_cuts_the_reply(client, engine):
    full = greedy(engine, HELLO, 12)
    words = full.split()
    assert len(words) >= 3, full
    stop = " " + words[2]  # a word in the middle of the greedy reply
    r = client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=12, temperature=0, stop=[stop])
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].message.content == full[: full.index(stop)]


def test_seeded_sampling_repeats(client):
    kw = dict(model=MODEL, messages=HELLO, max_tokens=6, temperature=1.0, top_p=0.9, seed=7)
    a = client.chat.completions.create(**kw).choices[0].message.content
    b = client.chat.completions.create(**kw).choices[0].message.content
    assert a == b


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"temperature": 5}, "temperature"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"top_p": 0}, "top_p"),
    ({"n": 2}, "n"),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "robot", "content": "hi"}]}, "messages[0].role"),
])
def test_invalid_requests_are_400_naming_the_field(client, kwargs, field):
    body = {"model": MODEL, "messages": HELLO, "max_tokens": 4, **kwargs}
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(**body)
    assert e.value.status_code == 400
    assert e.value.body["param"] == field
    assert field in e.value.body["message"]


def test_prompt_over_the_context_window_is_400_and_the_server_lives_on(client, engine):
    long = "hello " * (engine.token_limit + 100)
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": long}], max_tokens=4)
    assert e.value.body["code"] == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL, prompt="hi", max_tokens=engine.token_limit)
    assert e.value.body["param"] == "max_tokens"
    assert client.completions.create(model=MODEL, prompt="hi", max_tokens=2, temperature=0).usage.completion_tokens


def test_wrong_key_is_401_and_unknown_model_404(server, client):
    bad = openai.OpenAI(base_url=server.base_url, api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="gpt-4o", messages=HELLO, max_tokens=2)
    assert e.value.body["code"] == "model_not_found"


def test_disconnect_mid_stream_frees_the_blocks(client, engine):
    total = total_blocks(engine)
    stream = client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=400, temperature=0,
                                            stream=True)
    got = 0
    for c in stream:
        got += bool(c.choices and c.choices[0].delta.content)
        if got == 3:
            break
    assert free_blocks(engine) < total  # the request holds blocks while it streams
    stream.close()  # the client goes away mid-reply
    assert wait_blocks_idle(engine) == total
    assert not engine.requests


def test_queue_limit_answers_429_with_retry_after(engine, server):
    small = ServerThread(engine, ServerConfig(port=0, api_key=KEY, model_name=MODEL, max_queue=1,
                                              retry_after_s=2)).start()
    try:
        c = openai.OpenAI(base_url=small.base_url, api_key=KEY, max_retries=0, timeout=60)
        first = c.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=200, temperature=0, stream=True)
        next(iter(first))  # admitted and streaming
        with pytest.raises(openai.RateLimitError) as e:
            c.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=2)
        assert e.value.status_code == 429
        assert e.value.response.headers["retry-after"] == "2"
        first.close()
    finally:
        small.stop()
    assert wait_blocks_idle(engine) == total_blocks(engine)


def test_ignore_eos_gives_exactly_max_tokens(client):
    r = client.completions.create(model=MODEL, prompt="Hi", max_tokens=5, temperature=0,
                                  extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 5 and r.choices[0].finish_reason == "length"


def test_metrics_count_requests_tokens_latency_and_cache(client, server, engine):
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    def scrape() -> dict[str, float]:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=10) as r:
            text = r.read().decode()
        return {s.name + str(sorted(s.labels.items())): s.value
                for fam in text_string_to_metric_families(text) for s in fam.samples}

    before = scrape()
    for _ in range(2):  # the second turn finds the first one's prompt in the prefix cache
        r = client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=3, temperature=0)
    after = scrape()
    assert after["parley_generation_tokens_total[]"] - before["parley_generation_tokens_total[]"] == 2 * (
        r.usage.completion_tokens)
    assert after["parley_prompt_tokens_total[]"] - before["parley_prompt_tokens_total[]"] == 2 * r.usage.prompt_tokens
    assert after["parley_time_to_first_token_seconds_count[]"] - before["parley_time_to_first_token_seconds_count[]"] == 2
    assert after["parley_inter_token_latency_seconds_count[]"] > before["parley_inter_token_latency_seconds_count[]"]
    key = "parley_http_requests_total[('endpoint', '/v1/chat/completions'), ('status', '200')]"
    assert after[key] - before.get(key, 0) == 2
    assert r.usage.prompt_tokens_details.cached_tokens > 0
    assert 0 < after["parley_prefix_cache_hit_rate[]"] <= 1
    assert after["parley_kv_cache_free_blocks[]"] == free_blocks(engine) == after["parley_kv_cache_blocks[]"]
    assert after["parley_kv_cache_usage_ratio[]"] == 0.0
    assert "parley_spec_acceptance_rate[]" in after


async def test_voice_session_style_client_streams_turns_and_barges_in(server, engine):
    """What a voice session's OpenAI LLM does (`--llm openai --base-url`): the async client,
    streaming with usage, a growing conversation that hits the prefix cache, and a barge-in
    that cancels the reply mid-stream."""
    client = openai.AsyncOpenAI(base_url=server.base_url, api_key=KEY, max_retries=0, timeout=60)
    chat = [{"role": "system", "content": "You are a helpful voice assistant. Answer briefly."},
            {"role": "user", "content": "What is the capital of France?"}]
    stream = await client.chat.completions.create(model=MODEL, messages=chat, max_tokens=10, temperature=0,
                                                  stream=True, stream_options={"include_usage": True})
    reply, usage = "", None
    async for c in stream:
        reply += "".join(ch.delta.content or "" for ch in c.choices)
        usage = c.usage or usage
    assert reply and usage.completion_tokens >= 1
    chat += [{"role": "assistant", "content": reply}, {"role": "user", "content": "And of Spain?"}]
    stream = await client.chat.completions.create(model=MODEL, messages=chat, max_tokens=300, temperature=0,
                                                  stream=True)
    async for c in stream:
        if c.choices and c.choices[0].delta.content:
            break  # the user speaks over the first words
    await stream.close()
    assert wait_blocks_idle(engine) == total_blocks(engine)
    r = await client.chat.completions.create(model=MODEL, messages=chat, max_tokens=2, temperature=0)
    assert r.usage.prompt_tokens_details.cached_tokens >= 16  # the earlier turns' blocks were reused
    await client.close()
