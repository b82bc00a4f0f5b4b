"""Graceful shutdown of `parley serve`: in-flight streams finish (or, past the timeout, end with
an error event), new requests get 503 + Retry-After meanwhile, every KV block comes back, and
the real CLI process exits 0 on SIGTERM."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import openai
import pytest

from llm_engine import LLMEngine
from llm_engine.server import ServerConfig, ServerThread
from llm_engine.server.metrics import free_blocks, total_blocks

pytestmark = pytest.mark.integration

MODEL = "smollm2-135m-instruct"
HELLO = [{"role": "user", "content": "Tell me about the sea."}]
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def engine():
    # `parley serve`'s default: speculation "auto", so draining and cutting run through it too
    from llm_engine.speculative.config import SpeculativeConfig

    return LLMEngine.from_pretrained(max_num_seqs=4, num_threads=1, speculative=SpeculativeConfig(method="auto"))


def health(port: int) -> tuple[int, dict, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as r:
            return r.status, dict(r.headers), json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), json.loads(e.read())


def wait_for(cond, timeout_s: float = 15.0) -> bool:
    t_end = time.monotonic() + timeout_s
    while time.monotonic() < t_end:
        if cond():
            return True
        time.sleep(0.02)
    return False


def test_drain_lets_streams_finish_and_refuses_new_requests(engine):
    srv = ServerThread(engine, ServerConfig(port=0, model_name=MODEL, retry_after_s=3)).start()
    client = openai.OpenAI(base_url=srv.base_url, api_key="none", max_retries=0, timeout=60)
    stream = client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=24, temperature=0,
                                            stream=True, extra_body={"ignore_eos": True},
                                            stream_options={"include_usage": True})
    chunks = [next(stream), next(stream)]  # role chunk, first content: the request is running
    stopper = threading.Thread(target=srv.stop)
    stopper.start()  # as SIGTERM does
    assert wait_for(lambda: health(srv.port)[0] == 503)
    with pytest.raises(openai.APIStatusError) as e:
        client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=2)
    assert e.value.status_code == 503 and e.value.response.headers["retry-after"] == "3"
    assert e.value.body["code"] == "shutting_down"
    chunks += list(stream)  # the in-flight stream runs to its end
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]
    assert chunks[-1].usage.completion_tokens == 24
    stopper.join(30)
    assert not stopper.is_alive() and srv.cut == 0
    assert wait_for(lambda: free_blocks(engine) == total_blocks(engine))


def test_metrics_report_speculative_acceptance(engine):
    from prometheus_client.parser import text_string_to_metric_families

    srv = ServerThread(engine, ServerConfig(port=0, model_name=MODEL)).start()
    try:
        client = openai.OpenAI(base_url=srv.base_url, api_key="none", max_retries=0, timeout=60)
        client.chat.completions.create(model=MODEL, max_tokens=16, temperature=0, messages=[
            {"role": "user", "content": "Repeat after me: the quick brown fox jumps over the lazy dog."}])
        with urllib.request.urlopen(f"http://127.0.0.1:{srv.port}/metrics", timeout=10) as r:
            fams = {f.name: f.samples[0].value for f in text_string_to_metric_families(r.read().decode()) if f.samples}
    finally:
        srv.stop()
    spec = engine.spec_metrics
    assert fams["parley_spec_draft_tokens"] == spec.drafted > 0
    assert fams["parley_spec_accepted_tokens"] == spec.accepted
    assert fams["parley_spec_acceptance_rate"] == pytest.approx(spec.accepted / spec.drafted)


def test_past_the_timeout_streams_end_with_an_error_and_free_their_blocks(engine):
    srv = ServerThread(engine, ServerConfig(port=0, model_name=MODEL, shutdown_timeout_s=0.3)).start()
    client = openai.OpenAI(base_url=srv.base_url, api_key="none", max_retries=0, timeout=60)
    stream = client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=500, temperature=0,
                                            stream=True, extra_body={"ignore_eos": True})
    next(stream), next(stream)
    stopper = threading.Thread(target=srv.stop)
    stopper.start()
    with pytest.raises(openai.APIError, match="shut down"):
        for _ in stream:
            pass
    stopper.join(30)
    assert srv.cut == 1
    assert wait_for(lambda: free_blocks(engine) == total_blocks(engine))


@pytest.mark.slow
def test_sigterm_on_the_cli_finishes_the_stream_then_exits_0():
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "serve", "--port", "0", "--speculative", "none"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        port = None
        for line in proc.stdout:
            if m := re.search(r"on http://127\.0\.0\.1:(\d+)/v1", line):
                port = int(m.group(1))
                break
        assert port is not None, "parley serve exited before listening"
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0, timeout=60)
        stream = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=16, temperature=0,
                                           stream=True, extra_body={"ignore_eos": True},
                                           stream_options={"include_usage": True})
        next(stream)
        proc.send_signal(signal.SIGTERM)
        rest = list(stream)
        assert [c.choices[0].finish_reason for c in rest if c.choices and c.choices[0].finish_reason] == ["length"]
        assert rest[-1].usage.completion_tokens == 16
        assert proc.wait(timeout=60) == 0
        assert "stopped (0 requests cut short)" in proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
