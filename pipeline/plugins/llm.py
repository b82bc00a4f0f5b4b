"""`ParleyLLM`: a livekit `llm.LLM` over our engine's streaming API (LLMEngine or FakeLLM:
anything with `stream_chat(messages, params)` returning an async iterator of text deltas that
aborts the request when closed, and, optionally, `encode_chat` / `token_limit` / `prefill`)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from typing import Any

from livekit.agents import llm
from livekit.agents.types import DEFAULT_API_CONNECT_OPTIONS, NOT_GIVEN, APIConnectOptions, NotGivenOr

from llm_engine.sampling_params import SamplingParams
from parley.errors import StageOutputError, StageTimeoutError
from pipeline.budget import ResponsePolicy
from pipeline.context import ContextTrim
from pipeline.repeats import RepeatGuard
from pipeline.turn_text import without_end_punctuation
from tts.chunker import sentence_end

log = logging.getLogger("parley.llm")


def chat_messages(chat_ctx: llm.ChatContext) -> list[dict[str, str]]:
    """ChatContext -> [{"role", "content"}] with plain-text content, system messages first
    (tool calls and non-text parts are dropped: the embedded model has no tools), each user
    message without its end punctuation (see without_end_punctuation)."""
    raw, _ = chat_ctx.to_provider_format("openai", inject_dummy_user_message=False)
    out: list[dict[str, str]] = []
    for m in raw:
        role = "system" if m.get("role") == "developer" else m.get("role")
        if role not in ("system", "user", "assistant"):
            continue
        content = m.get("content")
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        if isinstance(content, str) and role == "user":
            content = without_end_punctuation(content)
        if not isinstance(content, str) or not content.strip():
            continue
        if out and out[-1]["role"] == role and role != "system":  # merge split turns
            out[-1]["content"] += " " + content
        else:
            out.append({"role": role, "content": content})
    return out


def without_dropped(chat_ctx: llm.ChatContext, sent: list[dict[str, str]]) -> llm.ChatContext | None:
    """A copy of `chat_ctx` (the request's history and what came after it, e.g. the reply)
    without the oldest items that `fit_context` dropped from the request `sent`; the system
    messages stay. None when nothing was dropped, or when `sent` is not this history's request.

    Messages fit_context dropped are never sent again (the kept history starts at a cut point
    that only moves forward), so the session forgets them instead of keeping every turn. The
    copy's oldest message is the kept start, itself a cut point, and the cut points after it
    depend only on the messages before them: the next requests keep the same prefix, and
    the engine's prefix cache still holds it."""
    full, n = chat_messages(chat_ctx), len(sent) - 1
    if n < 1 or sent[0]["role"] != "system" or not full or full[0] != sent[0]:
        return None
    # where the request's messages are: the newest match (a soak asks the same thing each turn)
    start = next((p for p in range(len(full) - n, 0, -1) if full[p:p + n] == sent[1:]), None)
    if start is None or start == 1:
        return None
    items = chat_ctx.items
    system = [i for i, it in enumerate(items) if getattr(it, "role", None) in ("system", "developer")]
    rest = sorted(set(range(len(items))) - set(system))
    for k in range(start - 1, len(rest)):  # each dropped message was at least one item
        trimmed = llm.ChatContext([items[i] for i in system] + [items[i] for i in rest[k:]])
        msgs = chat_messages(trimmed)
        if msgs == [full[0], *full[start:]]:
            return trimmed
        if len(msgs) < len(full) - start + 1:
            return None
    return None


class ParleyLLM(llm.LLM):
    """`marks(name)` records the request, an acknowledgement and the first token in the budget;
    `time_left_s()` (the budget's) decides when a late first token is covered by a short
    acknowledgement (`policy`), spoken as the reply's first words and kept in the history.
    `sentence_after_tokens`: past this many text deltas (~tokens) the reply ends at its next
    sentence end (the engine's own `max_tokens` is the hard limit); None: it runs to the engine's.
    `max_sentences`: the reply ends at its n-th sentence end (0: no limit); the engine request
    is aborted there."""

    def __init__(self, engine: Any, params: SamplingParams, *, model_name: str = "parley-engine",
                 marks: Callable[[str], None] | None = None, policy: ResponsePolicy | None = None,
                 time_left_s: Callable[[], float | None] = lambda: None, deadline_s: float | None = None,
                 trim: ContextTrim | None = None, sentence_after_tokens: int | None = None,
                 max_sentences: int = 0) -> None:
        super().__init__()
        if sentence_after_tokens is not None and sentence_after_tokens < 1:
            raise ValueError(f"sentence_after_tokens must be >= 1, got {sentence_after_tokens}")
        if max_sentences < 0:
            raise ValueError(f"max_sentences must be >= 0, got {max_sentences}")
        self.sentence_after_tokens, self.max_sentences = sentence_after_tokens, max_sentences
        # how requests trim the history (default: the reply's max_tokens kept free, the engine's window)
        self.trim = trim or ContextTrim(reserve=params.max_tokens)
        if deadline_s is not None and deadline_s <= 0:
            raise ValueError(f"deadline_s must be positive, got {deadline_s}")
        self.deadline_s = deadline_s  # the longest wait for the next token (None: no deadline)
        self.engine, self.params = engine, params
        self._model_name = model_name
        self._marks = marks or (lambda _name: None)
        self.policy = policy or ResponsePolicy(ack_enabled=False)
        self._time_left = time_left_s
        self._requests = 0
        self.last_usage: llm.CompletionUsage | None = None  # of the newest finished request
        self.last_messages: list[dict[str, str]] = []  # what the newest request sent (trimmed)

    @property
    def model(self) -> str:
        return self._model_name

    @property
    def provider(self) -> str:
        return "parley"

    def fit(self, messages: list[dict[str, str]]) -> list[dict[str, str]]:
        """`messages` trimmed as this plugin's requests trim them (`trim`)."""
        return self.trim.fit(self.engine, messages)

    def prefill_next_turn(self, sent: list[dict[str, str]], reply: str) -> str | None:
        """After a reply: prefill the next turn's history (the request `sent`, the reply, an
        empty user turn), trimmed as its request will be, while the reply plays and the user
        answers. When that trim moves the kept history's start, every token after the system
        prompt is new to the prefix cache: ~1500 at the default history budget, 7-8 s to
        prefill cold at one thread on a Zen 1 host, where a 38-turn soak lost 3 turns to the
        10 s first-token deadline. The engine runs it only in steps no request needs.
        Returns the engine's request id (None: an engine without `prefill`, or no room)."""
        prefill = getattr(self.engine, "prefill", None)
        if prefill is None:
            return None
        nxt = [*sent, {"role": "assistant", "content": reply}, {"role": "user", "content": ""}]
        try:
            return prefill(self.fit(nxt))
        except ValueError as e:  # too long for the cache right now: the real request will say so
            log.debug("next turn's prefill skipped: %s", e)
            return None

    def chat(self, *, chat_ctx: llm.ChatContext, tools: list[llm.Tool] | None = None,
             conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS,
             parallel_tool_calls: NotGivenOr[bool] = NOT_GIVEN, tool_choice: NotGivenOr[Any] = NOT_GIVEN,
             extra_kwargs: NotGivenOr[dict[str, Any]] = NOT_GIVEN) -> ParleyLLMStream:
        return ParleyLLMStream(self, chat_ctx=chat_ctx, tools=tools or [], conn_options=conn_options)


class ParleyLLMStream(llm.LLMStream):
    async def _run(self) -> None:
        plugin: ParleyLLM = self._llm  # type: ignore[assignment]
        engine = plugin.engine
        # off the loop: fitting a long history re-tokenizes it (milliseconds per pass)
        messages = await asyncio.to_thread(plugin.fit, chat_messages(self._chat_ctx))
        plugin.last_messages = messages
        self._spoken: list[str] = []
        request_id = f"voice-{uuid.uuid4().hex[:12]}"
        plugin._marks("llm_request")
        plugin._requests += 1
        ack_wait = plugin.policy.ack_wait_s(plugin._time_left())
        stream = engine.stream_chat(messages, plugin.params, request_id)
        n_deltas = 0
        first: asyncio.Future | None = None
        try:
            it = stream.__aiter__()
            first = asyncio.ensure_future(it.__anext__())
            if ack_wait is not None:
                await asyncio.wait({first}, timeout=ack_wait)
                if not first.done():  # the first token is late: cover the silence
                    plugin._marks("acknowledgement")
                    log.info("first token late (%.0f ms waited): acknowledging", 1000 * ack_wait)
                    self._send(request_id, plugin.policy.pick_ack(plugin._requests) + " ")
            delta = await _next(first, plugin.deadline_s)
            if delta is None:  # no text at all: say so (an apology) rather than stay silent
                raise StageOutputError("llm: the engine returned an empty reply")
            plugin._marks("llm_first_token")
            ending = _SentenceEnding(plugin.sentence_after_tokens, plugin.max_sentences)
            guard, repeated = RepeatGuard(), False
            while delta is not None:
                if not isinstance(delta, str):
                    raise StageOutputError(f"llm: a text delta of type {type(delta).__name__}")
                n_deltas += 1
                text, done = ending.push(delta)
                text, repeated = guard.push(text)
                if text:
                    self._send(request_id, text)
                if done or repeated:
                    break  # the engine request is aborted below
                delta = await _next(asyncio.ensure_future(it.__anext__()), plugin.deadline_s)
            if not repeated:
                rest, repeated = guard.push(ending.rest())
                if rest := rest + ("" if repeated else guard.finish()):
                    self._send(request_id, rest)
            if guard.repeats:
                log.info("the reply said a sentence again: ended there (%d deltas)", n_deltas)
        finally:
            if first is not None and not first.done():
                first.cancel()
            # cancelled (barge-in, a stale preemptive reply): abort the engine request now
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()
        out = getattr(stream, "output", None)
        prompt = len(out.prompt_token_ids) if out is not None else 0
        completion = len(out.token_ids) if out is not None else n_deltas
        cached = out.num_cached_tokens if out is not None else 0
        usage = llm.CompletionUsage(completion_tokens=completion, prompt_tokens=prompt,
                                    prompt_cached_tokens=cached, total_tokens=prompt + completion)
        plugin.last_usage = usage
        self._event_ch.send_nowait(llm.ChatChunk(id=request_id, usage=usage))
        # a whole reply (a cancelled or failed one raised above): its history, off the loop
        hint = asyncio.get_running_loop().run_in_executor(None, plugin.prefill_next_turn, messages,
                                                          "".join(self._spoken).strip())
        hint.add_done_callback(_log_failure)

    def _send(self, request_id: str, text: str) -> None:
        self._spoken.append(text)
        self._event_ch.send_nowait(llm.ChatChunk(id=request_id, delta=llm.ChoiceDelta(role="assistant", content=text)))


def _log_failure(fut: asyncio.Future) -> None:
    if not fut.cancelled() and (e := fut.exception()) is not None:
        log.warning("next turn's prefill failed: %r", e)


class _SentenceEnding:
    """Where a reply ends before the engine's hard limit. Past `after` deltas, text is held
    until a sentence end is decided (tts.sentence_end: a "." counts once the next character
    shows it is no "3.14"), then the reply stops there; at its `max_sentences`-th sentence end
    (0: no limit) it stops too. Held text is still spoken when the stream ends first."""

    def __init__(self, after: int | None, max_sentences: int = 0) -> None:
        self.after, self.max_sentences = after, max_sentences
        self.n = self.sentences = 0
        self.open = ""  # the text since the last sentence end, sent or held
        self.held = ""  # its unsent end

    def push(self, delta: str) -> tuple[str, bool]:
        """(text to send now, whether the reply ends here)."""
        self.n += 1
        holding = self.after is not None and self.n > self.after
        self.open += delta
        self.held += delta
        while (cut := sentence_end(self.open)) is not None:
            self.sentences += 1
            if holding or 0 < self.max_sentences <= self.sentences:
                # both are ends of the stream: held's text up to open's cut
                text = self.held[: max(cut + len(self.held) - len(self.open), 0)]
                self.held = ""
                return text, True
            self.open = self.open[cut:]
        if holding:
            return "", False
        text, self.held = self.held, ""
        return text, False

    def rest(self) -> str:
        text, self.held = self.held, ""
        return text


async def _next(step: asyncio.Future, deadline_s: float | None) -> Any:
    """The stream's next delta (None at its end) within the deadline, else StageTimeoutError."""
    try:
        return await asyncio.wait_for(step, deadline_s)
    except StopAsyncIteration:
        return None
    except TimeoutError:
        log.error("llm stalled: no token within %.2f s", deadline_s)
        raise StageTimeoutError("llm", deadline_s or 0.0, "token") from None


class PrefillAhead:
    """While the user speaks, prefill the conversation with their words so far (the engine's
    `prefill`), so the real request prefills only what changed. At most one in flight, at
    most one per `min_interval_s` of speech, and only for engines that have `prefill`. The
    history is trimmed as the real request will trim it (`trim`, the request's own), or the
    prefilled prefix would not be the one asked."""

    def __init__(self, engine: Any, history: Callable[[], list[dict[str, str]]], *,
                 min_interval_s: float = 0.6, min_words: int = 4, trim: ContextTrim | None = None) -> None:
        self.engine, self._history, self.trim = engine, history, trim or ContextTrim()
        self.min_interval_s, self.min_words = min_interval_s, min_words
        self._last = -1e9
        self._rid: str | None = None
        self.sent = 0

    def update(self, text: str, now: float) -> None:
        prefill = getattr(self.engine, "prefill", None)
        if prefill is None or len(text.split()) < self.min_words or now - self._last < self.min_interval_s:
            return
        self._last = now
        if self._rid is not None:
            self.engine.abort(self._rid)  # its full blocks are cached already: nothing is lost
        messages = [*self._history(), {"role": "user", "content": without_end_punctuation(text)}]
        try:
            self._rid = prefill(self.trim.fit(self.engine, messages))
            self.sent += 1
        except ValueError as e:  # too long for the cache right now: the real request will say so
            log.debug("prefill ahead skipped: %s", e)
