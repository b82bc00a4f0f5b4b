"""benchmarks/cpu_layer_stack.py: its variants really differ (the stack off means no stack
call), every variant says the same greedy text, and the model gets its stack back."""

from __future__ import annotations

import pytest

import benchmarks.cpu_layer_stack as bench
import llm_engine.cpu_layer as cpu_layer

pytestmark = pytest.mark.integration


def test_variants_switch_the_stack_and_agree(monkeypatch):
    calls, real = [], cpu_layer._stack_kernel()
    monkeypatch.setattr(cpu_layer, "_stack_kernel", lambda: lambda *a: calls.append(1) or real(*a))
    seen = []
    orig = bench.streams

    async def spy(engine, chats, params, clients):
        before = len(calls)
        out = await orig(engine, chats, params, clients)
        seen.append((engine.model.fused_stack is not None, len(calls) > before))
        return out

    monkeypatch.setattr(bench, "streams", spy)
    chat = [{"role": "user", "content": "Name a colour."}]
    r = bench.compare("int8", repeats=1, max_tokens=4, chats=[chat])
    assert {k for k in r if "_stack_" in k} == {
        f"{n}_stack_{s}" for n in ("plain", "auto_int8_head", "auto_bf16_head") for s in ("on", "off")}
    assert all(on == called for on, called in seen) and {on for on, _ in seen} == {True, False}
    assert r["greedy_identical"] is True
    assert r["stack_on_over_off"]["plain"] > 0
