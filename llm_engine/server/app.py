"""The aiohttp application: routes, API-key check, OpenAI-style error bodies, SSE streaming."""

from __future__ import annotations

import hmac
import json
import logging
import time
from typing import Any

from aiohttp import web

from llm_engine.server import protocol
from llm_engine.server.config import ServerConfig
from llm_engine.server.gateway import Gateway, Generation
from llm_engine.server.metrics import ServerMetrics, free_blocks, total_blocks
from llm_engine.server.protocol import APIError

log = logging.getLogger("parley.serve")

CONFIG = web.AppKey("config", ServerConfig)
GATEWAY = web.AppKey("gateway", Gateway)
METRICS = web.AppKey("metrics", ServerMetrics)
ENGINE = web.AppKey("engine", object)
CREATED = web.AppKey("created", int)
# An HTTP status aiohttp raises on its own (unknown route, wrong method, body too large) gets
# the same OpenAI error body as ours.
_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}


def _error_response(e: APIError, config: ServerConfig) -> web.Response:
    headers = {"Retry-After": str(config.retry_after_s)} if e.status in (429, 503) else None
    return web.json_response(e.body(), status=e.status, headers=headers)


@web.middleware
async def _errors_and_auth(request: web.Request, handler) -> web.StreamResponse:
    config, metrics = request.app[CONFIG], request.app[METRICS]
    resource = getattr(request.match_info.route, "resource", None)
    endpoint = resource.canonical if resource is not None else "unmatched"  # bounded label values
    try:
        if config.api_key is not None and request.path.startswith("/v1/"):
            given = request.headers.get("Authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {config.api_key}".encode()):
                raise APIError(401, "invalid or missing API key (Authorization: Bearer KEY)",
                               code="invalid_api_key")
        resp = await handler(request)
    except APIError as e:
        resp = _error_response(e, config)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        resp = _error_response(APIError(e.status, f"{e.reason}: {request.method} {request.path}",
                                        code=_HTTP_CODES.get(e.status)), config)
    metrics.requests.labels(endpoint, str(resp.status)).inc()
    return resp


async def _json(request: web.Request) -> Any:
    try:
        return await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise APIError(400, f"the request body is not valid JSON: {e}") from e


def _usage(gen: Generation) -> dict[str, Any]:
    out = gen.output
    return protocol.usage(len(out.prompt_token_ids), len(out.token_ids), out.num_cached_tokens)


async def _generate(request: web.Request, kind: str) -> web.StreamResponse:
    config, gateway = request.app[CONFIG], request.app[GATEWAY]
    req = protocol.parse_request(kind, await _json(request))
    if req.model != config.model_name:
        raise APIError(404, f"the model {req.model!r} does not exist; this server serves {config.model_name!r}",
                       param="model", code="model_not_found")
    gen = await gateway.start(req)
    try:
        if req.stream:
            return await _stream(request, gen)
        text = "".join([d async for d in gen])
        body = protocol.full_response(kind, gen.request_id, req.model, protocol.now(), text,
                                      gen.output.finish_reason, _usage(gen))
        return web.json_response(body)
    finally:
        gateway.close(gen)  # aborts in the engine unless finished: disconnects free their blocks


async def _stream(request: web.Request, gen: Generation) -> web.StreamResponse:
    req, created = gen.req, protocol.now()
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await resp.prepare(request)

    async def send(body: dict[str, Any] | str) -> None:
        data = body if isinstance(body, str) else json.dumps(body, separators=(",", ":"))
        await resp.write(f"data: {data}\n\n".encode())

    def chunk(text: str | None, finish: str | None = None, role: bool = False) -> dict[str, Any]:
        return protocol.chunk(req.kind, gen.request_id, req.model, created, text, finish, role=role,
                              include_usage=req.include_usage)

    try:
        if req.kind == "chat":
            await send(chunk("", role=True))
        async for delta in gen:
            await send(chunk(delta))
        await send(chunk(None, gen.output.finish_reason))
        if req.include_usage:
            await send(protocol.usage_chunk(req.kind, gen.request_id, req.model, created, _usage(gen)))
    except APIError as e:  # after the headers went out, an error is a last event
        await send(e.body())
    except ConnectionResetError:  # the client left: close() aborts the request
        log.info("client disconnected from %s", gen.request_id)
        return resp
    await send("[DONE]")
    await resp.write_eof()
    return resp


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, "chat")


async def completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, "completion")


def _model_card(request: web.Request) -> dict[str, Any]:
    return {"id": request.app[CONFIG].model_name, "object": "model", "created": request.app[CREATED],
            "owned_by": "parley", "max_model_len": request.app[ENGINE].token_limit}


async def models(request: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": [_model_card(request)]})


async def model(request: web.Request) -> web.Response:
    name = request.match_info["model"]
    if name != request.app[CONFIG].model_name:
        raise APIError(404, f"the model {name!r} does not exist", param="model", code="model_not_found")
    return web.json_response(_model_card(request))


async def health(request: web.Request) -> web.Response:
    gateway, engine = request.app[GATEWAY], request.app[ENGINE]
    body = {"status": "draining" if gateway.draining else "ok", "model": request.app[CONFIG].model_name,
            "requests_in_flight": gateway.in_flight,
            "kv_cache": {"free_blocks": free_blocks(engine), "total_blocks": total_blocks(engine)}}
    return web.json_response(body, status=503 if gateway.draining else 200)


async def metrics(request: web.Request) -> web.Response:
    data, content_type = request.app[METRICS].render()
    return web.Response(body=data, headers={"Content-Type": content_type})


def build_app(engine: Any, config: ServerConfig) -> web.Application:
    """The application for one engine. Must be built inside the event loop that will run it."""
    app = web.Application(middlewares=[_errors_and_auth], client_max_size=config.max_body_bytes)
    app[CONFIG], app[ENGINE] = config, engine
    app[METRICS] = ServerMetrics(engine)
    app[GATEWAY] = Gateway(engine, app[METRICS], config.max_queue)
    app[CREATED] = int(time.time())
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/v1/models/{model}", model)
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics)
    return app
