"""`parley talk`: refuses a public host without a token before loading anything; serves the
session factory it is given until Ctrl-C, then closes every session."""

from __future__ import annotations

import asyncio
import signal
import sys
import types

import pytest

from pipeline.cli import main
from tests.fake_session import FakeSessionFactory
from tests.talk_client import collect_until, send_speech
from tests.test_talk_limits import speech_like


@pytest.mark.parametrize("argv, words", [
    (["talk", "--host", "0.0.0.0"], "host 0.0.0.0 is reachable from other machines: pass --token"),
    (["talk", "--host", "10.1.2.3", "--token", "short"], "token must be at least 8 characters"),
    (["talk", "--max-sessions", "0"], "max_sessions must be >= 1"),
])
def test_talk_refuses_to_start(argv, words, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "pipeline.session", None)  # must fail before the session is needed
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("parley talk: error: ") and words in err and "Traceback" not in err


def test_talk_serves_the_session_until_ctrl_c(capsys, monkeypatch):
    from websockets.asyncio.client import connect

    factory = FakeSessionFactory()
    seen = {}

    class SessionConfig:
        @classmethod
        def from_args(cls, args):
            seen["args"] = args
            return cls()

    session = types.ModuleType("pipeline.session")
    session.SessionConfig = SessionConfig
    session.session_factory = lambda config, *a, **kw: factory
    closed: list[bool] = []
    session.load_components = lambda config: types.SimpleNamespace(close=lambda: closed.append(True))
    monkeypatch.setitem(sys.modules, "pipeline.session", session)

    async def talk(url: str) -> None:
        ws_url = url.replace("http://", "ws://").replace("/#token=", "/ws?token=")
        async with connect(ws_url) as ws:
            await ws.recv()  # the server's hello
            await ws.send('{"type": "hello", "sample_rate": 16000}')
            await send_speech(ws, speech_like())
            seen["got"] = await collect_until(ws, lambda g: len(g.frames) >= 2)
            signal.raise_signal(signal.SIGINT)  # what Ctrl-C does
            await asyncio.sleep(5)
            asyncio.get_running_loop().stop()  # Ctrl-C did not stop it: fail, do not hang

    tasks = []
    monkeypatch.setattr("webbrowser.open", lambda url: tasks.append(asyncio.get_running_loop().create_task(talk(url))))
    # a process started in the background by a shell without job control inherits SIGINT
    # ignored, and Python then leaves it ignored: Ctrl-C is what this test is about
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        rc = main(["talk", "--port", "0", "--token", "cli-test-token", "--max-sessions", "2", "--open"])
    finally:
        signal.signal(signal.SIGINT, previous)
    assert rc == 130
    assert seen["args"].max_sessions == 2 and seen["got"].of("budget")
    assert factory.sessions[0].aclose_calls == 1
    assert closed == [True]  # the models' threads end with the command
    err = capsys.readouterr().err
    assert "parley talk: open http://127.0.0.1:" in err and "/#token=cli-test-token" in err
