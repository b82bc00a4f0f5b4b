"""The latency budget and the LLM plugin's message handling, as units (no session)."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from llm_engine import LLMEngine
from pipeline.budget import BudgetConfig, LatencyBudget, ResponsePolicy
from pipeline.context import ContextTrim, fit_context
from pipeline.plugins.llm import chat_messages, without_dropped

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def run_turn(budget: LatencyBudget, clock: Clock, marks: list[tuple[str, float]]) -> None:
    budget.open_turn(clock.t)
    for name, dt in marks:
        clock.t += dt
        budget.mark(name, clock.t)


def test_a_turn_reports_each_stage_against_its_allotment_and_the_perceived_latency():
    from prometheus_client import CollectorRegistry

    clock, registry, seen = Clock(), CollectorRegistry(), []
    budget = LatencyBudget(BudgetConfig(), registry=registry, clock=clock)
    budget.subscribe(seen.append)
    run_turn(budget, clock, [("speech_end", 1.0), ("end_of_turn", 0.2), ("final_transcript", 0.03),
                             ("llm_request", 0.001), ("llm_first_token", 0.2), ("first_chunk", 0.05),
                             ("tts_first_audio", 0.06), ("output_first_frame", 0.01)])
    assert len(seen) == 1 and budget.turn is None
    r = seen[0]
    stages = {s["name"]: s for s in r["stages"]}
    assert stages["endpointing"]["ms"] == pytest.approx(200, abs=0.1)
    assert stages["first_token"]["overrun"] and not stages["endpointing"]["overrun"]
    assert r["overruns"] == ["first_token"]  # 551 ms in all: within the 600
    assert r["perceived_ms"] == pytest.approx(551, abs=0.1)
    assert registry.get_sample_value("parley_stage_overruns_total", {"stage": "first_token"}) == 1
    assert registry.get_sample_value("parley_perceived_latency_seconds_count") == 1


def test_preemptive_stages_are_hidden_and_a_restarted_generation_replaces_them():
    clock = Clock()
    budget = LatencyBudget(clock=clock)
    run_turn(budget, clock, [("speech_end", 1.0), ("llm_request", 0.2), ("llm_first_token", 0.1),
                             ("llm_request", 0.05)])  # the preflight reply was dropped: a new one
    assert "llm_first_token" not in budget.turn.marks
    run_turn(budget, clock, [("llm_first_token", 0.05), ("end_of_turn", 0.1), ("final_transcript", 0.01),
                             ("first_chunk", 0.02), ("tts_first_audio", 0.05), ("output_first_frame", 0.01)])
    r = budget.reports[-1]
    stages = {s["name"]: s for s in r["stages"]}
    assert stages["first_token"]["hidden"] and stages["first_token"]["ms"] == pytest.approx(50, abs=0.1)
    # the first clause took 130 ms, but all except the 20 after the final transcript was hidden
    clause = stages["first_clause"]
    assert clause["ms"] == pytest.approx(130, abs=0.1) and clause["critical_ms"] == pytest.approx(20, abs=0.1)
    assert r["perceived_ms"] == pytest.approx(590, abs=0.1) and r["overruns"] == ["endpointing"]


def test_an_acknowledged_turn_reports_once_the_first_token_is_known():
    clock = Clock()
    budget = LatencyBudget(clock=clock)
    run_turn(budget, clock, [("speech_end", 1.0), ("end_of_turn", 0.2), ("final_transcript", 0.02),
                             ("llm_request", 0.0), ("acknowledgement", 0.3), ("first_chunk", 0.02),
                             ("tts_first_audio", 0.03), ("output_first_frame", 0.01)])
    assert not budget.reports  # the ack is audible, the stage it covers is not over
    clock.t += 0.4
    budget.mark("llm_first_token", clock.t)
    r = budget.reports[0]
    assert r["acknowledged"] and r["perceived_ms"] == pytest.approx(580, abs=0.1)
    first_clause = next(s for s in r["stages"] if s["name"] == "first_clause")
    assert first_clause["ms"] is None  # the ack's chunk came before the token: no such stage


def test_marks_outside_a_user_turn_are_ignored_and_an_unanswered_turn_is_still_reported():
    clock = Clock()
    budget = LatencyBudget(clock=clock)
    budget.mark("output_first_frame")  # a greeting: no turn
    assert budget.turn is None and not budget.reports
    run_turn(budget, clock, [("speech_end", 1.0), ("end_of_turn", 0.2)])
    budget.open_turn(clock.t + 0.1)  # the user went on before any reply
    assert budget.reports[0]["perceived_ms"] is None and budget.turn.turn == 1


def test_a_long_session_keeps_only_the_newest_reports_and_still_sends_every_one():
    from pipeline.budget import REPORTS_KEPT

    clock = Clock()
    budget = LatencyBudget(clock=clock)
    seen: list[dict] = []
    budget.subscribe(seen.append)
    for _ in range(REPORTS_KEPT + 10):
        run_turn(budget, clock, [("speech_end", 1.0), ("end_of_turn", 0.2), ("final_transcript", 0.01),
                                 ("llm_request", 0.0), ("llm_first_token", 0.05), ("first_chunk", 0.02),
                                 ("tts_first_audio", 0.05), ("output_first_frame", 0.01)])
    assert len(seen) == REPORTS_KEPT + 10 and len(budget.reports) == REPORTS_KEPT
    assert budget.reports[-1] is seen[-1] and budget.reports[0] is seen[10]


def test_policy_turns_time_left_into_first_chunk_words_and_ack_wait():
    p = ResponsePolicy()
    assert p.first_words(None) == 2 and p.first_words(-0.5) == 1 and p.first_words(2.0) == 6
    assert p.ack_wait_s(1.0) == pytest.approx(0.75) and p.ack_wait_s(-1.0) == p.ack_grace_s
    assert ResponsePolicy(ack_enabled=False).ack_wait_s(1.0) is None
    with pytest.raises(ValueError):
        BudgetConfig(first_token_ms=0)


def test_history_is_trimmed_to_the_context_window_keeping_the_system_prompt():
    engine = LLMEngine.from_pretrained(max_model_len=256)
    system = {"role": "system", "content": "You are a helpful voice assistant."}
    turns = [{"role": r, "content": f"message number {i} " + "word " * 20}
             for i, r in zip(range(30), ["user", "assistant"] * 15)]
    msgs = fit_context(engine, [system, *turns], reserve=60)
    assert msgs[0] == system and msgs[-1] == turns[-1]
    assert len(engine.encode_chat(msgs)) + 60 < engine.token_limit
    assert len(msgs) < 31 and msgs[1:] == turns[-(len(msgs) - 1):]  # the oldest went first
    assert fit_context(engine, msgs[:3], reserve=60) == msgs[:3]  # short: untouched
    # a history budget below the engine's window trims harder, the same way
    capped = fit_context(engine, [system, *turns], reserve=60, max_tokens=160)
    assert capped[0] == system and len(engine.encode_chat(capped)) + 60 < 160 and len(capped) < len(msgs)


def test_a_growing_history_keeps_its_start_for_several_turns():
    # as a session calls it: the whole history, one user + assistant pair longer each turn
    engine = LLMEngine.from_pretrained(max_model_len=512)
    system = {"role": "system", "content": "You are a helpful voice assistant."}
    history, starts = [system], []
    for i in range(60):
        history.append({"role": "user", "content": f"question {i}: what is the weather like today?"})
        msgs = fit_context(engine, history, reserve=60)
        assert msgs[0] == system and msgs[-1] == history[-1]
        assert len(engine.encode_chat(msgs)) + 60 < engine.token_limit
        assert msgs[1:] == history[len(history) - len(msgs) + 1:]  # a suffix: the oldest go first
        starts.append(len(history) - len(msgs))
        history.append({"role": "assistant", "content": f"answer {i}: " + "sunny and mild, " * 4})
    assert starts[-1] > 0, "60 turns overflow a 512-token window"
    moves = sum(b != a for a, b in itertools.pairwise(starts))
    # a start that moved every turn re-prefilled the whole window every turn; a quarter of the
    # window (~128 tokens, ~2.5 turns here) per move: it may move at most every other turn
    assert moves <= (len(starts) - starts.index(next(s for s in starts if s))) / 2, starts


def test_with_an_allowance_the_kept_history_is_known_before_the_user_speaks():
    # the session prefills the next turn's history while a reply plays (ParleyLLM.
    # prefill_next_turn); that is worth it only if the real request keeps the same history
    engine = LLMEngine.from_pretrained(max_model_len=512)
    system = {"role": "system", "content": "You are a helpful voice assistant."}

    def misses(allowance: int) -> int:
        history, missed = [system], 0
        for i in range(60):
            ahead = fit_context(engine, [*history, {"role": "user", "content": ""}], 60, allowance=allowance)
            user = {"role": "user", "content": f"question {i}: " + "what is the weather like today? " * (i % 4)}
            sent = fit_context(engine, [*history, user], 60, allowance=allowance)
            assert sent[0] == system and sent[-1] == user and len(engine.encode_chat(sent)) + 60 < engine.token_limit
            missed += sent[:-1] != ahead[:-1]
            history += [user, {"role": "assistant", "content": f"answer {i}: " + "sunny and mild, " * (1 + i % 5)}]
        return missed

    assert misses(allowance=48) == 0  # every user turn here is under 48 tokens
    assert misses(allowance=0) > 0  # without it the user's words decide some cuts


def test_one_trim_for_the_whole_session():
    from pipeline.config import SessionConfig

    c = SessionConfig(max_tokens=40, sentence_grace_tokens=8, context_tokens=1024)
    assert c.trim == ContextTrim(reserve=48, context_tokens=1024, allowance=64)
    for bad in ({"reserve": -1}, {"allowance": -1}, {"context_tokens": 0}):
        with pytest.raises(ValueError):
            ContextTrim(**bad)
    engine = LLMEngine.from_pretrained(max_model_len=256)
    history = [{"role": "system", "content": "Be brief."}] + [
        {"role": r, "content": f"message {i} " * 6} for i in range(30) for r in ("user", "assistant")]
    trim = ContextTrim(reserve=40, context_tokens=200, allowance=16)
    assert trim.fit(engine, history) == fit_context(engine, history, 40, max_tokens=200, allowance=16)
    assert trim.fit(engine, history)[0] == history[0] and len(trim.fit(engine, history)) < len(history)


def test_forgetting_what_was_dropped_sends_the_same_requests_and_bounds_the_history():
    # two sessions side by side, one keeping every message, one forgetting what each request
    # dropped (as pipeline/session.py does after each reply): every request must be the same
    from livekit.agents import llm

    engine = LLMEngine.from_pretrained(max_model_len=512)
    full, kept = llm.ChatContext.empty(), llm.ChatContext.empty()
    for ctx in (full, kept):
        ctx.add_message(role="system", content="You are a helpful voice assistant.")
    forgot, sizes = 0, []
    for i in range(60):
        for ctx in (full, kept):
            ctx.add_message(role="user", content=f"question {i}: what is the weather like today?")
        sent = fit_context(engine, chat_messages(full), reserve=60)
        assert fit_context(engine, chat_messages(kept), reserve=60) == sent, i
        for ctx in (full, kept):
            ctx.add_message(role="assistant", content=f"answer {i}: " + "sunny and mild, " * (1 + i % 5))
        trimmed = without_dropped(kept, sent)
        if trimmed is not None:
            forgot += 1
            assert chat_messages(trimmed) == [*sent, chat_messages(kept)[-1]]  # the system prompt first
            kept = trimmed
        sizes.append(len(kept.items))
    assert forgot >= 3 and max(sizes[30:]) < len(full.items) / 3, sizes
    assert without_dropped(kept, chat_messages(kept)[:-1]) is None  # nothing dropped: nothing to forget


def test_forgetting_drops_every_item_of_a_merged_message_or_nothing():
    from livekit.agents import llm

    ctx = llm.ChatContext.empty()
    ctx.add_message(role="system", content="sys")
    ctx.add_message(role="user", content="part one")
    ctx.add_message(role="user", content="part two")  # one message when sent: "part one part two"
    ctx.add_message(role="assistant", content="reply")
    ctx.add_message(role="user", content="next")
    ctx.add_message(role="assistant", content="answer")
    sent = [{"role": "system", "content": "sys"}, {"role": "assistant", "content": "reply"},
            {"role": "user", "content": "next"}]
    trimmed = without_dropped(ctx, sent)
    assert trimmed is not None and len(trimmed.items) == 4  # both user items went
    assert chat_messages(trimmed) == [*sent, {"role": "assistant", "content": "answer"}]
    other = [{"role": "system", "content": "sys"}, {"role": "user", "content": "never said"}, sent[-1]]
    assert without_dropped(ctx, other) is None  # not this history's request: nothing forgotten


async def test_prefill_ahead_caches_the_words_so_far_for_the_real_request():
    from llm_engine import SamplingParams
    from pipeline.plugins.llm import PrefillAhead

    engine = LLMEngine.from_pretrained()
    history = [{"role": "system", "content": "You are Parley, a friendly voice assistant."}]
    ahead = PrefillAhead(engine, lambda: list(history), min_interval_s=0.5)
    ahead.update("what is", 0.0)  # too few words: nothing sent
    ahead.update("what is the capital of France", 1.0)
    ahead.update("what is the capital of France and", 1.2)  # too soon after the last one
    assert ahead.sent == 1
    for _ in range(200):
        if engine.num_free_blocks == engine.num_blocks:  # done: its blocks are cached and free
            break
        await asyncio.sleep(0.02)
    stream = engine.stream_chat([*history, {"role": "user", "content": "what is the capital of France"}],
                                SamplingParams(max_tokens=4, temperature=0.0))
    async for _ in stream:
        pass
    out = stream.output
    assert out.num_cached_tokens >= len(out.prompt_token_ids) - engine.bm.block_size, out.num_cached_tokens


def test_the_next_turn_hits_the_cache_through_a_reply_asked_with_the_preflight_words():
    # the preemptive reply is asked with the preflight words; livekit then keeps the final
    # transcript, whose end mark the pause decode held back, in the history. The next turn's
    # prompt must still spell that message as it was asked, or it misses the prefix cache from
    # there on and prefills the whole reply again.
    from livekit.agents import llm

    from llm_engine import SamplingParams

    engine = LLMEngine.from_pretrained(max_model_len=512, block_size=16)
    ctx = llm.ChatContext.empty()
    ctx.add_message(role="system", content="You are a helpful voice assistant.")
    ctx.add_message(role="user", content="What will the weather be like in Chicago on Saturday")
    asked = chat_messages(ctx)
    reply = engine.chat([asked], SamplingParams(max_tokens=40, temperature=0.0))[0]
    ctx.items[-1].content = ["What will the weather be like in Chicago on Saturday?"]
    ctx.add_message(role="assistant", content=reply.text)
    ctx.add_message(role="user", content="And on Sunday?")
    nxt = chat_messages(ctx)
    assert nxt[1] == asked[1] and nxt[-1]["content"] == "And on Sunday"
    through_reply = (len(engine.encode_chat(asked)) + len(reply.token_ids) - 1) // 16 * 16
    one = SamplingParams(max_tokens=1)
    assert engine.chat([nxt], one)[0].num_cached_tokens >= through_reply  # every full block
    # spelled as the history keeps it, the same prompt hits only up to that message
    kept = [nxt[0], {**nxt[1], "content": nxt[1]["content"] + "?"}, *nxt[2:]]
    assert engine.chat([kept], one)[0].num_cached_tokens <= len(engine.encode_chat(asked[:1])) + 16
