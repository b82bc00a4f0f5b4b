"""The LiveKit agent worker: every room job runs one voice session on the process's shared
models (jobs run as threads of this process, so sessions share one engine, batched)."""

from __future__ import annotations

import asyncio
import logging
import os

from pipeline.allocator import freeze_loaded_objects
from pipeline.audio_io import MarkingAudioOutput
from pipeline.components import Components, load_components
from pipeline.config import SessionConfig
from pipeline.session import build_session

log = logging.getLogger("parley.worker")
LIVEKIT_ENV = ("LIVEKIT_URL", "LIVEKIT_API_KEY", "LIVEKIT_API_SECRET")


def missing_livekit_env(environ=os.environ) -> list[str]:
    return [name for name in LIVEKIT_ENV if not environ.get(name)]


def build_worker(config: SessionConfig, *, max_retry: int = 16, components: Components | None = None,
                 freeze_loaded: bool = False):
    """An AgentServer whose room sessions run `config`. Models load on the first job; with
    `freeze_loaded` (a process that is the worker's alone: `parley livekit`), the objects alive
    then leave the garbage collector's reach (pipeline/allocator.py, freeze_loaded_objects)."""
    from livekit.agents import AgentServer, JobContext
    from livekit.agents.job import JobExecutorType

    server = AgentServer(job_executor_type=JobExecutorType.THREAD, max_retry=max_retry,
                         num_idle_processes=0)
    loaded: dict[str, Components] = {} if components is None else {"c": components}
    lock = asyncio.Lock()

    @server.rtc_session()
    async def parley_session(ctx: JobContext) -> None:
        async with lock:
            if "c" not in loaded:
                loaded["c"] = await asyncio.to_thread(load_components, config)
                if freeze_loaded:
                    freeze_loaded_objects()
        await ctx.connect()
        parts = build_session(config, loaded["c"])
        await parts.session.start(parts.agent, room=ctx.room)
        room_out = parts.session.output.audio
        if room_out is not None:
            parts.session.output.audio = MarkingAudioOutput(
                room_out, lambda t: parts.budget.mark("output_first_frame", t))
        log.info("parley session started in room %s", ctx.room.name)

    server.parley_entrypoint = parley_session  # for tests: the function the jobs run
    return server


def join_token(room: str, identity: str, environ=os.environ, ttl_s: int = 6 * 3600) -> str:
    from datetime import timedelta

    from livekit import api

    missing = [n for n in ("LIVEKIT_API_KEY", "LIVEKIT_API_SECRET") if not environ.get(n)]
    if missing:
        raise ValueError(f"{' and '.join(missing)} must be set to sign a token")
    if not room or not identity:
        raise ValueError("--room and --identity must not be empty")
    token = (api.AccessToken(environ["LIVEKIT_API_KEY"], environ["LIVEKIT_API_SECRET"])
             .with_identity(identity).with_name(identity).with_ttl(timedelta(seconds=ttl_s))
             .with_grants(api.VideoGrants(room_join=True, room=room)))
    return token.to_jwt()
