"""`parley serve`: the LLM engine as an OpenAI-compatible server (llm_engine/server/)."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path


def register(sub) -> None:
    from pipeline.config import SPECULATIVE, WEIGHT_FORMATS

    p = sub.add_parser("serve", help="the LLM engine as an OpenAI-compatible HTTP server",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", default=None, help="a Hugging Face dir or .gguf file (default: the embedded SmolLM2)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind; off loopback --api-key is required")
    p.add_argument("--port", type=int, default=8000, help="TCP port (0: any free port)")
    p.add_argument("--api-key", default=None, help="clients must send 'Authorization: Bearer KEY' on /v1/*")
    p.add_argument("--speculative", choices=SPECULATIVE, default="auto",
                   help="speculative decoding method ('none' turns it off)")
    p.add_argument("--weight-format", choices=WEIGHT_FORMATS, default="fp32",
                   help="CPU weight format")
    p.add_argument("--served-model-name", default=None,
                   help="the model id clients name (default: the embedded model's key or the file's stem)")
    p.add_argument("--max-num-seqs", type=int, default=32, help="sequences batched in one engine step")
    p.add_argument("--max-queue", type=int, default=128,
                   help="requests admitted at once (running + waiting); more get 429 + Retry-After")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads of the engine")
    p.add_argument("--shutdown-timeout", type=float, default=30.0,
                   help="seconds in-flight requests get to finish on SIGTERM/SIGINT")
    p.set_defaults(func=run)


def run(args) -> int:
    import asyncio

    from llm_engine import LLMEngine
    from llm_engine.engine import DEFAULT_MODEL
    from llm_engine.server import ServerConfig, serve
    from pipeline.allocator import freeze_loaded_objects

    name = args.served_model_name or (Path(args.model).stem if args.model else DEFAULT_MODEL)
    # Validated before the model loads, so a refused --host costs nothing.
    config = ServerConfig(host=args.host, port=args.port, api_key=args.api_key, model_name=name,
                          max_queue=args.max_queue, shutdown_timeout_s=args.shutdown_timeout)
    spec = None
    if args.speculative != "none":
        from llm_engine.speculative.config import SpeculativeConfig

        spec = SpeculativeConfig(method=args.speculative)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    engine = LLMEngine.from_pretrained(args.model, speculative=spec, weight_format=args.weight_format,
                                       num_threads=args.threads, max_num_seqs=args.max_num_seqs)
    freeze_loaded_objects()  # this process is ours: see pipeline/allocator.py

    def ready(port: int) -> None:
        print(f"parley serve: {name} on http://{config.host}:{port}/v1", flush=True)

    try:
        cut = asyncio.run(serve(engine, config, on_ready=ready))
    except OSError as e:  # the port is taken, the address is not ours: one line, not a traceback
        print(f"parley serve: error: cannot listen on {config.host}:{config.port}: {e.strerror or e}",
              file=sys.stderr)
        return 2
    finally:  # after the drain: what is still in the engine ends with an error, its thread stops
        engine.close()
    print(f"parley serve: stopped ({cut} requests cut short)", flush=True)
    return 0
