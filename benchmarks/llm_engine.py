"""LLM engine benchmark: our engine vs transformers `generate` on the embedded SmolLM2 GGUF,
side by side in one process, at 1 and 2 threads.

Reports decode tok/s at batch 1 and 8, TTFT for a 512-token prompt cold and with a
prefix-cache hit + 16 new tokens, peak RSS, RSS drift over many requests, and the
weight-streaming floor (decode weight bytes / memory bandwidth measured here). Our engine
runs three ways: fp32 (the default), fp32 with `linear_backend="torch"` (plain F.linear, the
route before llm_engine.linear), and bf16 weights (`weight_format="bf16"`), int8 weights
with int8 activations (`weight_format="int8"`) and the GGUF's own 4-bit blocks with int8
activations (`weight_format="q4"`), whose greedy tokens are compared with fp32's on the
committed voice prompts. llama.cpp (llama_cpp) is measured only when importable.

The streaming section (--stream; --stream-only skips the rest) measures the serving path the
voice loop and `parley serve` use, at 1 thread: 1 and 4 concurrent `stream_chat` clients on the
committed voice prompts, speculation off vs "auto", per weight format: time to first delta,
time to the first clause (first punctuation, or the 8th delta), decode tok/s, acceptance and
tokens per target pass, beside `generate()` on the same prompts in the same run; whether the
greedy text is identical with and without speculation; and TTFT of a ~300-token conversation
whose prompt (with the last words of the user turn still missing) was prefilled ahead, and
after the turn detector's score of the whole words, vs cold.

    python -m benchmarks.llm_engine --threads 1 2 --json out.json
    python -m benchmarks.llm_engine --stream-only --threads 1 --json out.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import statistics
import time
from pathlib import Path

import torch

from benchmarks.llm_streaming import stream_section, stream_table
from llm_engine import LLMEngine, SamplingParams
from llm_engine.model import weight_bytes
from parley.assets import model_path

VARIANTS = {"ours": {}, "ours_torch_linear": {"linear_backend": "torch"}, "ours_bf16": {"weight_format": "bf16"},
            "ours_int8": {"weight_format": "int8"}, "ours_q4": {"weight_format": "q4"}}
QUANTIZED = ("bf16", "int8", "q4")  # the formats compared with fp32 (bytes, greedy agreement)


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def bandwidth_gbs(repeats: int = 5) -> float:
    """Read bandwidth: sum over a 256 MiB fp32 buffer (well past the caches)."""
    x = torch.ones(64 * 1024 * 1024)
    x.sum()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        x.sum()
        times.append(time.perf_counter() - t)
    return x.nbytes / statistics.median(times) / 1e9


def ours_decode(engine: LLMEngine, prompt: list[int], batch: int, n: int) -> float:
    """Aggregate decode tok/s: tokens after the first, over the time after the first token."""
    params = SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)
    outs = engine.generate([prompt] * batch, params)
    # every request in the batch starts together; decode time = total - ttft
    dec = statistics.median(o.metrics["total_s"] - o.metrics["ttft_s"] for o in outs)
    return batch * (n - 1) / dec


def ours_ttft(engine: LLMEngine, prompt: list[int]) -> float:
    out = engine.generate([prompt], SamplingParams(max_tokens=1, temperature=0.0))[0]
    return out.metrics["ttft_s"]


def hf_decode(model, prompt: list[int], batch: int, n: int) -> float:
    ids = torch.tensor([prompt] * batch)
    kw = dict(do_sample=False, eos_token_id=None, pad_token_id=0)
    with torch.no_grad():
        t = time.perf_counter()
        model.generate(ids, max_new_tokens=1, **kw)
        t1 = time.perf_counter() - t
        t = time.perf_counter()
        model.generate(ids, max_new_tokens=n, **kw)
        tn = time.perf_counter() - t
    return batch * (n - 1) / (tn - t1)


def llama_cpp_decode(path, prompt: list[int], n: int, threads: int) -> float:
    """llama.cpp on the same GGUF file (its own quantized weights, as shipped): greedy decode
    tok/s after the prompt, batch 1."""
    from llama_cpp import Llama

    llm = Llama(model_path=str(path), n_ctx=1024, n_threads=threads, n_threads_batch=threads, verbose=False)
    llm.reset()
    llm.eval(prompt)
    t = time.perf_counter()
    for _ in range(n - 1):
        llm.eval([llm.sample(temp=0.0)])
    return (n - 1) / (time.perf_counter() - t)


def greedy_agreement(a: LLMEngine, b: LLMEngine, n: int = 48) -> dict:
    """Tokens until the first difference, per committed voice prompt (last user turn)."""
    spec = json.loads((Path(__file__).parent / "data" / "voice_prompts.json").read_text())
    params = SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)
    same = []
    for chat in spec["chats"]:
        ids = a.encode_chat([{"role": "system", "content": spec["system"]}, *chat["messages"]])
        x, y = (e.generate([ids], params)[0].token_ids for e in (a, b))
        same.append(next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), n))
    return {"prompts": len(same), "identical": sum(s == n for s in same), "tokens_before_divergence": same}


def run(threads: list[int], n: int, flat_requests: int, with_hf: bool) -> dict:
    engines = {name: LLMEngine.from_pretrained(max_cache_tokens=8192, max_num_seqs=16, **kw)
               for name, kw in VARIANTS.items()}
    engine = engines["ours"]
    tok = engine.tokenizer
    wbytes = weight_bytes(engine.model)
    chat = engine.encode_chat([{"role": "user", "content": "Tell me a long story about a dragon."}])
    long_text = " ".join(f"Sentence {i} is about the weather in city number {i}." for i in range(60))
    long_prompt = tok.encode(long_text)[:512]
    hf = None
    if with_hf:
        from transformers import AutoModelForCausalLM

        p = model_path("smollm2-135m-instruct")
        hf = AutoModelForCausalLM.from_pretrained(str(p.parent), gguf_file=p.name, dtype=torch.float32).eval()
    res: dict = {"weight_bytes": wbytes, **{f"{f}_weight_bytes": weight_bytes(engines[f"ours_{f}"].model)
                                            for f in QUANTIZED},
                 "n_tokens": n, "llama_cpp": None, "by_threads": {}}
    have_llama_cpp = importlib.util.find_spec("llama_cpp") is not None
    res["llama_cpp"] = "measured" if have_llama_cpp else "not installed: skipped"
    if have_llama_cpp:  # which SIMD paths its build took (AVX2 = 1, AVX512 = 0, ...)
        import llama_cpp

        res["llama_cpp_system_info"] = llama_cpp.llama_print_system_info().decode(errors="replace").strip()
    for th in threads:
        torch.set_num_threads(th)
        bw = bandwidth_gbs()
        r = {"bandwidth_gbs": bw, "floor_tok_s": bw * 1e9 / wbytes}
        runs: dict[str, list[float]] = {name: [] for name in engines}
        for _ in range(3):  # interleaved repeats: load drifts hit every variant alike
            for name, e in engines.items():
                runs[name].append(ours_decode(e, chat, 1, n))
        for name, e in engines.items():
            r[f"{name}_b1_tok_s"] = statistics.median(runs[name])
            r[f"{name}_b8_tok_s"] = ours_decode(e, chat, 8, n)
        cold = tok.encode(f"Run {th}.") + long_prompt  # a prefix never seen before: nothing cached
        cold = cold[:512]
        r["ttft_cold_512_s"] = ours_ttft(engine, cold)
        r["ttft_hit_512p16_s"] = ours_ttft(engine, cold + tok.encode(" And then it rained, all day long,"
                                                                      " over the quiet old town.")[:16])
        if hf is not None:
            r["hf_b1_tok_s"] = statistics.median(hf_decode(hf, chat, 1, n) for _ in range(2))
            r["hf_b8_tok_s"] = hf_decode(hf, chat, 8, n)
            r["ours_vs_hf_b1"] = r["ours_b1_tok_s"] / r["hf_b1_tok_s"]
            r["ours_bf16_vs_hf_b1"] = r["ours_bf16_b1_tok_s"] / r["hf_b1_tok_s"]
        if have_llama_cpp:
            r["llama_cpp_b1_tok_s"] = statistics.median(
                llama_cpp_decode(model_path("smollm2-135m-instruct"), chat, n, th) for _ in range(3))
            for f in QUANTIZED:
                r[f"ours_{f}_vs_llama_cpp_b1"] = r[f"ours_{f}_b1_tok_s"] / r["llama_cpp_b1_tok_s"]
        r["ours_vs_floor_b1"] = r["ours_b1_tok_s"] / r["floor_tok_s"]
        r["ours_vs_torch_linear_b1"] = r["ours_b1_tok_s"] / r["ours_torch_linear_b1_tok_s"]
        r["bf16_floor_tok_s"] = bw * 1e9 / res["bf16_weight_bytes"]
        r["prefix_hit_over_cold"] = r["ttft_hit_512p16_s"] / r["ttft_cold_512_s"]
        res["by_threads"][str(th)] = r
        print(f"threads={th}: " + json.dumps(r), flush=True)
    torch.set_num_threads(threads[0])
    for f in QUANTIZED:
        res[f"{f}_vs_fp32_greedy"] = greedy_agreement(engine, engines[f"ours_{f}"])
    before = rss_mb()
    params = SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True)
    for i in range(flat_requests):
        engine.generate([[*chat, 1000 + i % 500]], params)
    res["rss_before_mb"], res["rss_after_mb"] = before, rss_mb()
    res["flat_requests"] = flat_requests
    res["peak_rss_mb"] = peak_rss_mb()
    res["kv_cache_mb"] = engine.kv.nbytes / 2**20
    return res


def table(res: dict) -> str:
    keys = ["bandwidth_gbs", "floor_tok_s", "ours_b1_tok_s", "ours_torch_linear_b1_tok_s", "hf_b1_tok_s",
            "ours_vs_hf_b1", "ours_vs_torch_linear_b1", "ours_vs_floor_b1", "ours_bf16_b1_tok_s", "bf16_floor_tok_s",
            "ours_bf16_vs_hf_b1", "ours_int8_b1_tok_s", "ours_q4_b1_tok_s", "llama_cpp_b1_tok_s",
            "ours_bf16_vs_llama_cpp_b1", "ours_int8_vs_llama_cpp_b1", "ours_q4_vs_llama_cpp_b1", "ours_b8_tok_s",
            "ours_bf16_b8_tok_s", "ours_int8_b8_tok_s", "ours_q4_b8_tok_s", "hf_b8_tok_s",
            "ttft_cold_512_s", "ttft_hit_512p16_s", "prefix_hit_over_cold"]
    ths = list(res["by_threads"])
    lines = ["| metric | " + " | ".join(f"{t} thread(s)" for t in ths) + " |", "|---|" + "---|" * len(ths)]
    for k in keys:
        vals = [res["by_threads"][t].get(k) for t in ths]
        lines.append(f"| {k} | " + " | ".join("-" if v is None else f"{v:.3f}" for v in vals) + " |")
    lines.append(f"\npeak RSS {res['peak_rss_mb']:.0f} MB; RSS over {res['flat_requests']} requests: "
                 f"{res['rss_before_mb']:.0f} -> {res['rss_after_mb']:.0f} MB; KV cache {res['kv_cache_mb']:.0f} MB;"
                 f" weights streamed per token {res['weight_bytes'] / 1e6:.0f} MB ("
                 + ", ".join(f"{f}: {res[f'{f}_weight_bytes'] / 1e6:.0f} MB" for f in QUANTIZED)
                 + f"); llama.cpp: {res['llama_cpp']}")
    for fmt in QUANTIZED:
        g = res[f"{fmt}_vs_fp32_greedy"]
        lines.append(f"{fmt} vs fp32 greedy ({g['prompts']} prompts, 48 tokens): {g['identical']} identical;"
                     f" tokens before divergence {g['tokens_before_divergence']}")
    return "\n".join(lines)


def machine() -> dict:
    """The CPU beside every figure: model (with family/model: the name alone is generic on cloud
    machines), its vector extensions, cores, and the load when the run began (a shared machine:
    other jobs' load moves every figure; compare ratios taken in one run)."""
    from benchmarks.voice_report import cpu_model
    from kernels.cpu_native import cpu_flags

    flags = cpu_flags()
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "load_avg_1m_start": os.getloadavg()[0],
            "simd": [f for f in ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx_vnni") if f in flags]}


def main(argv: list[str] | None = None, prog: str | None = None) -> None:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--flat-requests", type=int, default=1000)
    ap.add_argument("--no-hf", action="store_true", help="skip the transformers baseline")
    ap.add_argument("--stream", action="store_true", help="add the streaming / speculation section")
    ap.add_argument("--stream-only", action="store_true", help="run only the streaming section")
    ap.add_argument("--formats", nargs="+", default=["fp32", "bf16", "int8", "q4"], help="streaming: weight formats")
    ap.add_argument("--stream-tokens", type=int, default=48, help="streaming: max tokens per reply")
    ap.add_argument("--stream-repeats", type=int, default=1, help="streaming: passes over the prompts")
    ap.add_argument("--json", default=None)
    ap.add_argument("--kernel-march", default=None, metavar="ARCH",
                    help="build our C++ kernels with -march=ARCH instead of the host's (x86-64-v3: the AVX2 "
                         "paths on an AVX-512 host), to set code paths side by side on one machine")
    a = ap.parse_args(argv)
    res: dict = {"machine": machine()}
    if a.kernel_march:  # this process is the benchmark's own: before any kernel is built
        import kernels.cpu_native as native

        native.FLAGS = tuple(f"-march={a.kernel_march}" if f == "-march=native" else f for f in native.FLAGS)
        res["machine"]["kernel_march"] = a.kernel_march
    if not a.stream_only:
        res |= run(a.threads, a.tokens, a.flat_requests, not a.no_hf)
        print(table(res))
    if a.stream or a.stream_only:
        torch.set_num_threads(1)
        res["stream"] = stream_section(a.formats, a.stream_tokens, a.stream_repeats)
        print(stream_table(res["stream"]))
    res["machine"]["load_avg_1m_end"] = os.getloadavg()[0]
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
