"""`parley serve` under concurrent load, and the same load in-process (no HTTP) beside it.

    python -m benchmarks.serve_load [--clients 1,8,32] [--requests-per-client 2] [--max-tokens 32] [--repeats 1]
                                    [--weight-format fp32] [--speculative none] [--server process|thread]
                                    [--json out.json]

For each client count C, C streaming clients send a fixed number of chat requests
(C x --requests-per-client, at least --min-requests), each one back to back with the previous
one of the same client, over loopback HTTP to a `parley serve` process (--server process: the
real CLI in its own process, as in production; --server thread: in this process, for tests).
Every reply is exactly --max-tokens tokens (greedy, ignore_eos) so all runs do the same work.
Prompts: the voice chats of benchmarks/data/voice_prompts.json, in turn. Measured per level:
aggregate completion tokens/s (tokens / wall time of the level), time to first content token
and inter-token latency (gaps between content deltas) p50/p99 at the client, errors, and the
free KV blocks after the level (must be all of them: every request's blocks returned).

The in-process run sends the same requests through the server's own gateway (tokenization,
add_request, the engine thread, deltas onto an asyncio loop) with no HTTP, on an engine with
the same settings; levels alternate HTTP / in-process so load from other processes hits both
alike. Ratios reported: aggregate tokens/s at C clients over 1 client (HTTP, medians over the
repeats), and HTTP over in-process at each C (the median of the per-repeat ratios: each pair
runs back to back, so a shared machine's changing load mostly cancels). The run ends by itself; it binds to 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

from pipeline.config import SPECULATIVE, WEIGHT_FORMATS

DATA = Path(__file__).parent / "data" / "voice_prompts.json"
MODEL = "smollm2-135m-instruct"
READY = re.compile(r"on http://127\.0\.0\.1:(\d+)/v1")


def load_conversations() -> list[list[dict[str, str]]]:
    spec = json.loads(DATA.read_text())
    return [[{"role": "system", "content": spec["system"]}, *c["messages"]] for c in spec["chats"]]


def request_body(conv: list[dict[str, str]], max_tokens: int) -> dict[str, Any]:
    return {"model": MODEL, "messages": conv, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}}


class Trace:
    """What one level saw: per-request first-token times and token gaps, tokens, errors."""

    def __init__(self) -> None:
        self.ttft: list[float] = []
        self.itl: list[float] = []
        self.tokens = 0
        self.errors: list[str] = []

    def summary(self, clients: int, requests: int, wall_s: float) -> dict[str, Any]:
        def pct(xs: list[float], q: float) -> float | None:
            return round(float(np.percentile(xs, q)) * 1e3, 2) if xs else None

        return {"clients": clients, "requests": requests, "tokens": self.tokens, "wall_s": round(wall_s, 3),
                "aggregate_tok_s": round(self.tokens / wall_s, 2) if wall_s > 0 else 0.0,
                "ttft_ms_p50": pct(self.ttft, 50), "ttft_ms_p99": pct(self.ttft, 99),
                "itl_ms_p50": pct(self.itl, 50), "itl_ms_p99": pct(self.itl, 99),
                "errors": len(self.errors), "error_samples": self.errors[:3]}


async def http_request(session: aiohttp.ClientSession, url: str, body: dict, trace: Trace) -> None:
    t0 = time.perf_counter()
    last = None
    try:
        async with session.post(url, json=body) as resp:
            if resp.status != 200:
                trace.errors.append(f"HTTP {resp.status}: {(await resp.text())[:200]}")
                return
            async for raw in resp.content:
                line = raw.decode().strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                ev = json.loads(line[6:])
                if "error" in ev:
                    trace.errors.append(str(ev["error"])[:200])
                    return
                if ev.get("usage"):
                    trace.tokens += ev["usage"]["completion_tokens"]
                if ev["choices"] and ev["choices"][0]["delta"].get("content"):
                    now = time.perf_counter()
                    if last is None:
                        trace.ttft.append(now - t0)
                    else:
                        trace.itl.append(now - last)
                    last = now
    except (aiohttp.ClientError, TimeoutError) as e:
        trace.errors.append(f"{type(e).__name__}: {e}")


async def inproc_request(gateway, body: dict, trace: Trace) -> None:
    from llm_engine.server.protocol import APIError, parse_request

    t0 = time.perf_counter()
    last = None
    try:
        gen = await gateway.start(parse_request("chat", body))
    except APIError as e:
        trace.errors.append(str(e))
        return
    try:
        async for _delta in gen:
            now = time.perf_counter()
            if last is None:
                trace.ttft.append(now - t0)
            else:
                trace.itl.append(now - last)
            last = now
        trace.tokens += len(gen.output.token_ids)
    except APIError as e:
        trace.errors.append(str(e))
    finally:
        gateway.close(gen)


async def run_level(send, clients: int, requests: int, convs, max_tokens: int) -> tuple[Trace, float]:
    """`clients` workers share `requests` requests; each worker sends its next one when its
    previous reply ended (closed-loop load, as chat clients behave)."""
    trace, todo = Trace(), iter(range(requests))

    async def worker() -> None:
        for i in todo:
            await send(request_body(convs[i % len(convs)], max_tokens), trace)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(clients)))
    return trace, time.perf_counter() - t0


def start_server_process(args) -> tuple[subprocess.Popen, int]:
    cmd = [sys.executable, "-m", "pipeline.cli", "serve", "--host", "127.0.0.1", "--port", "0",
           "--max-num-seqs", str(args.max_num_seqs), "--max-queue", str(4 * max(args.clients)),
           "--weight-format", args.weight_format, "--speculative", args.speculative, "--threads", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            cwd=Path(__file__).resolve().parents[1])
    for line in proc.stdout:
        if m := READY.search(line):
            return proc, int(m.group(1))
    raise RuntimeError(f"`parley serve` exited ({proc.wait()}) before listening")


def stop_server_process(proc: subprocess.Popen) -> int:
    proc.terminate()  # SIGTERM: the graceful path
    try:
        return proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


async def fetch_health(session: aiohttp.ClientSession, base: str) -> dict:
    async with session.get(f"{base}/health") as r:
        return await r.json()


async def idle_blocks(read, timeout_s: float = 10.0) -> tuple[int, int]:
    """(free, total) KV blocks once every block is back, or as they stand after timeout_s."""
    t_end = time.monotonic() + timeout_s
    while True:
        free, total = await read()
        if free == total or time.monotonic() > t_end:
            return free, total
        await asyncio.sleep(0.05)


async def bench(args, engine) -> dict[str, Any]:
    from llm_engine.server import ServerConfig, ServerThread
    from llm_engine.server.gateway import Gateway
    from llm_engine.server.metrics import ServerMetrics, free_blocks, total_blocks

    convs = load_conversations()
    proc = thread = None
    if args.server == "process":
        proc, port = start_server_process(args)
    else:
        thread = ServerThread(engine, ServerConfig(port=0, max_queue=4 * max(args.clients))).start()
        port = thread.port
    base = f"http://127.0.0.1:{port}"
    gateway = Gateway(engine, ServerMetrics(engine), max_queue=4 * max(args.clients))

    async def engine_blocks() -> tuple[int, int]:
        return free_blocks(engine), total_blocks(engine)

    levels: list[dict[str, Any]] = []
    timeout = aiohttp.ClientTimeout(total=600)
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(timeout=timeout, connector=conn) as session:
        url = f"{base}/v1/chat/completions"

        async def http_send(body: dict, trace: Trace) -> None:
            await http_request(session, url, body, trace)

        async def inproc_send(body: dict, trace: Trace) -> None:
            await inproc_request(gateway, body, trace)

        async def server_blocks() -> tuple[int, int]:
            kv = (await fetch_health(session, base))["kv_cache"]
            return kv["free_blocks"], kv["total_blocks"]

        for send in (http_send, inproc_send):  # warm-up: kernels, caches, the engine thread
            await run_level(send, 1, 1, convs, 4)
        for rep in range(args.repeats):
            for clients in args.clients:
                requests = max(args.min_requests, clients * args.requests_per_client)
                modes = (("http", http_send, server_blocks), ("inproc", inproc_send, engine_blocks))
                for mode, send, blocks in modes if rep % 2 == 0 else modes[::-1]:
                    trace, wall = await run_level(send, clients, requests, convs, args.max_tokens)
                    row = {"mode": mode, "repeat": rep, **trace.summary(clients, requests, wall)}
                    row["free_blocks_after"], row["total_blocks"] = await idle_blocks(blocks)
                    levels.append(row)
                    print(json.dumps(row), flush=True)
    exit_code = stop_server_process(proc) if proc is not None else (thread.stop() or 0)
    return {"levels": levels, "server_exit_code": exit_code}


def summarize(levels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (mode, clients): medians over the repeats of each figure, errors summed, and whether
    every repeat ended with all blocks free."""
    keys = ("aggregate_tok_s", "ttft_ms_p50", "ttft_ms_p99", "itl_ms_p50", "itl_ms_p99")
    out = []
    for mode, clients in dict.fromkeys((r["mode"], r["clients"]) for r in levels):
        rows = [r for r in levels if r["mode"] == mode and r["clients"] == clients]
        row = {"mode": mode, "clients": clients, "repeats": len(rows),
               "requests_each": rows[0]["requests"], "errors": sum(r["errors"] for r in rows),
               "blocks_back_to_idle": all(r["free_blocks_after"] == r["total_blocks"] for r in rows)}
        for k in keys:
            vals = [r[k] for r in rows if r[k] is not None]
            row[k] = round(statistics.median(vals), 2) if vals else None
        out.append(row)
    return out


def paired_ratios(levels: list[dict[str, Any]], clients: int) -> list[float]:
    """HTTP over in-process tokens/s for each repeat: the two runs of a pair are adjacent in
    time, so a change in the machine's load between repeats cancels out of the ratio."""
    by = {(r["mode"], r["repeat"]): r["aggregate_tok_s"] for r in levels if r["clients"] == clients}
    reps = sorted({r for _, r in by})
    return [round(by[("http", r)] / by[("inproc", r)], 3) for r in reps if by.get(("inproc", r))]


def verdict(summary: list[dict[str, Any]], levels: list[dict[str, Any]], clients: list[int]) -> dict[str, Any]:
    by = {(r["mode"], r["clients"]): r for r in summary}
    out: dict[str, Any] = {"errors": sum(r["errors"] for r in summary),
                           "blocks_back_to_idle": all(r["blocks_back_to_idle"] for r in summary)}
    one = by.get(("http", 1))
    for c in clients:
        pairs = paired_ratios(levels, c)
        out[f"http_over_inproc_at_{c}_per_repeat"] = pairs
        out[f"http_over_inproc_at_{c}"] = round(statistics.median(pairs), 3)
        if one is not None and c != 1:
            out[f"http_{c}_over_1_client"] = round(by[("http", c)]["aggregate_tok_s"] / one["aggregate_tok_s"], 3)
    # The targets on the 2-core CPU.
    if 32 in clients and one is not None:
        out["target_32_clients_ge_4x"] = out["http_32_over_1_client"] >= 4.0
    if 8 in clients:
        out["target_http_ge_0.9x_inproc_at_8"] = out["http_over_inproc_at_8"] >= 0.9
    out["target_zero_errors"] = out["errors"] == 0
    out["target_blocks_idle"] = out["blocks_back_to_idle"]
    return out


def parse_args(argv: list[str] | None, prog: str | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", default="1,8,32", help="comma-separated concurrent client counts")
    p.add_argument("--requests-per-client", type=int, default=2)
    p.add_argument("--repeats", type=int, default=1,
                   help="run every level this many times (HTTP and in-process alternating first); medians reported")
    p.add_argument("--min-requests", type=int, default=8, help="at least this many requests per level")
    p.add_argument("--max-tokens", type=int, default=32, help="tokens per reply (exactly: ignore_eos)")
    p.add_argument("--weight-format", choices=WEIGHT_FORMATS, default="fp32")
    p.add_argument("--speculative", choices=SPECULATIVE, default="none",
                   help="the server's speculation (and the in-process engine's); 'none' by default so "
                        "the batching measured is plain decoding")
    p.add_argument("--max-num-seqs", type=int, default=None,
                   help="sequences one engine step batches (server and in-process); default: the largest --clients")
    p.add_argument("--server", choices=("process", "thread"), default="process")
    p.add_argument("--json", type=Path, default=None, help="write the results here")
    args = p.parse_args(argv)
    try:
        args.clients = sorted({int(c) for c in args.clients.split(",")})
    except ValueError:
        p.error(f"--clients must be comma-separated integers, got {args.clients!r}")
    args.max_num_seqs = args.max_num_seqs or max(args.clients)
    if not args.clients or min(args.clients) < 1 or args.max_tokens < 2 or args.requests_per_client < 1 or args.repeats < 1:
        p.error("need client counts >= 1, --max-tokens >= 2, --requests-per-client and --repeats >= 1")
    return args


def main(argv: list[str] | None = None, prog: str | None = None) -> dict[str, Any]:
    args = parse_args(argv, prog)
    from llm_engine import LLMEngine

    spec = None
    if args.speculative != "none":
        from llm_engine.speculative.config import SpeculativeConfig

        spec = SpeculativeConfig(method=args.speculative)
    engine = LLMEngine.from_pretrained(speculative=spec, weight_format=args.weight_format, num_threads=1,
                                       max_num_seqs=args.max_num_seqs)
    result = asyncio.run(bench(args, engine))
    result["summary"] = summarize(result["levels"])
    result["verdict"] = verdict(result["summary"], result["levels"], args.clients)
    result["config"] = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    result["machine"] = {"cpu": _cpu_name(), "cores": os.cpu_count(), "load_avg_1m": os.getloadavg()[0]}
    for row in result["summary"]:
        print(json.dumps(row))
    print(json.dumps(result["verdict"], indent=1))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return result


def _cpu_name() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown"


if __name__ == "__main__":
    main()
