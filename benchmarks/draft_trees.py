"""Draft trees against draft chains for the EAGLE head: would drafting several candidates per
position (EAGLE-2, SpecInfer) pay for its wider verify pass on this CPU?

    python -m benchmarks.draft_trees [--max-tokens 48] [--threads 1] [--json out.json]

Greedy speculative decoding emits exactly the plain greedy reply whatever the drafter, so any
drafting shape can be replayed on that reply: at each step the shape's tree is drafted by the
shipped head from the verified context, the longest root path of it that the reply continues
is accepted plus one target token, and the walk moves on, as a verify pass with tree
attention would. tau = tokens per target pass. Shapes: chains of k (width 1) and level-wise
trees (at each depth the `width` likeliest frontier nodes by cumulative log-probability are
expanded into their `width` likeliest children; the `nodes` likeliest nodes of all are kept),
each alone ("head") and with n-gram lookup's continuation put in first ("auto", as
HybridDrafter). The cost side is measured in the same run on the fp32 engine: a target pass
over r query rows (r = nodes + 1 with tree attention, the fewest a tree can cost) and the
head's drafting step. Projected speedup over plain decoding = tau * pass(1) / (pass(r) +
depth * head step); "linear" also extrapolates pass(r) above 8 rows with the 1-8 row slope
(the best a wider gemv kernel could do). Prompts: benchmarks/data/voice_prompts.json. The
reply's features come from one prefill of prompt + reply, not from verify passes (float
summation order differs; a head prediction flips only on near-ties).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from benchmarks.speculative import load_prompts
from llm_engine.speculative import HeadDrafter, HybridDrafter, SpecRequest, SpeculativeDecoder, load_head
from llm_engine.speculative.engine_target import EngineTarget

# (width, depth, nodes): chains k = 1..6, then trees of growing width and node budget
SHAPES = [(1, k, k) for k in range(1, 7)] + [(2, 4, 6), (2, 5, 8), (3, 5, 8), (3, 5, 11), (4, 6, 15)]
ROWS = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16)


def draft_tree(hyb: HybridDrafter, sid: str, ctx: list[int], shape: tuple[int, int, int],
               with_ngram: bool) -> set[tuple[int, ...]]:
    """The kept nodes, each named by its path of token ids from the root (closed under prefixes)."""
    width, depth, nodes = shape
    head: HeadDrafter = hyb.head
    score = {(t,): lp for t, lp in head.children(sid, ctx, (), width)}
    frontier = list(score)
    for _ in range(depth - 1):
        frontier = sorted(frontier, key=lambda p: -score[p])[:width]
        grown = []
        for p in frontier:
            for t, lp in head.children(sid, ctx, p, width):
                score[(*p, t)] = score[p] + lp
                grown.append((*p, t))
        frontier = grown
    keep: set[tuple[int, ...]] = set()
    if with_ngram:
        ng = hyb.lookup.propose(sid, ctx, nodes).token_ids
        keep.update(tuple(ng[: i + 1]) for i in range(len(ng)))
    for p in sorted(score, key=lambda p: (-score[p], len(p))):
        if len(keep) >= nodes:
            break
        if len(p) == 1 or p[:-1] in keep:
            keep.add(p)
    return keep


def replay(hyb: HybridDrafter, refs: list[tuple[str, list[int], list[int], torch.Tensor]],
           shape: tuple[int, int, int], with_ngram: bool) -> dict:
    passes = emitted = 0
    for sid, prompt, reply, feats in refs:
        fed, j = 0, 0
        while j < len(reply) - 1:  # reply[: j + 1] emitted; one verify pass per iteration
            ctx = prompt + reply[: j + 1]
            hyb.accepted(sid, ctx, features=feats[fed : len(ctx) - 1])  # [n, D] newly verified
            fed = len(ctx) - 1
            tree = draft_tree(hyb, sid, ctx, shape, with_ngram)
            m = 0
            while m < len(reply) - j - 1 and tuple(reply[j + 1 : j + 2 + m]) in tree:
                m += 1
            passes, emitted, j = passes + 1, emitted + m + 1, j + m + 1
        hyb.release(sid)
    return {"tau": emitted / passes, "passes": passes}


def references(target: EngineTarget, engine, max_tokens: int) -> list[tuple[str, list[int], list[int], torch.Tensor]]:
    """Each prompt's greedy reply and the target's features over prompt + reply ([T, D])."""
    eos = tuple(sorted(engine.eos_token_ids))
    out = []
    for pid, _, ids in load_prompts(engine):
        r = SpecRequest(pid, ids, max_tokens=max_tokens, stop_ids=eos)
        SpeculativeDecoder(target, None).generate([r])
        feats, _ = target.extend(pid, ids + r.output)
        target.release(pid)
        out.append((pid, ids, r.output, feats))
    return out


def step_costs(target: EngineTarget, hyb: HybridDrafter, ref, reps: int = 9) -> tuple[dict[int, float], float]:
    """-> (seconds of a target pass per query-row count, seconds per head drafting step)."""
    sid, prompt, reply, feats = ref
    ctx = prompt + reply[:1]
    target.extend(sid, prompt)
    hyb.accepted(sid, ctx, features=feats[: len(prompt)])
    passes: dict[int, list[float]] = {r: [] for r in ROWS}
    head: list[float] = []
    for _ in range(reps):
        for r in ROWS:
            n = target.length(sid)
            t = time.perf_counter()
            target.extend(sid, (reply * 16)[:r])
            passes[r].append(time.perf_counter() - t)
            target.truncate(sid, n)
            t = time.perf_counter()  # after a target pass, as in decoding (its weights evicted the head's)
            hyb.head.propose(sid, ctx, 4)
            head.append((time.perf_counter() - t) / 4)
    target.release(sid)
    hyb.release(sid)
    return {r: statistics.median(v) for r, v in passes.items()}, statistics.median(head)


def project(tau: float, rows: int, depth: int, cost: dict[int, float], head_s: float, linear: bool) -> float:
    slope = (cost[8] - cost[1]) / 7
    verify = cost[1] + slope * (rows - 1) if linear and rows > 8 else cost.get(rows)
    if verify is None:  # between measured row counts
        lo, hi = max(r for r in cost if r < rows), min(r for r in cost if r > rows)
        verify = cost[lo] + (cost[hi] - cost[lo]) * (rows - lo) / (hi - lo)
    return tau * cost[1] / (verify + depth * head_s)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description="draft trees vs chains for the EAGLE head (teacher-forced, CPU)")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    from llm_engine import LLMEngine

    torch.set_num_threads(args.threads)
    engine = LLMEngine.from_pretrained(enable_prefix_caching=False)
    target = EngineTarget(engine)
    w, eps = target.norm()
    hyb = HybridDrafter(HeadDrafter(load_head(), target.embed_weight(), target.lm_head_weight(), w, eps))
    refs = references(target, engine, args.max_tokens)
    cost, head_s = step_costs(target, hyb, refs[0])
    rows_out = []
    print(f"{'shape':14} {'drafter':7} {'tau':>5} {'rows':>4} {'x plain':>7} {'linear':>7}")
    for shape in SHAPES:
        for name, with_ngram in (("head", False), ("auto", True)):
            r = replay(hyb, refs, shape, with_ngram)
            rows = shape[2] + 1
            r.update(width=shape[0], depth=shape[1], nodes=shape[2], drafter=name, verify_rows=rows,
                     speedup=project(r["tau"], rows, shape[1], cost, head_s, False),
                     speedup_linear=project(r["tau"], rows, shape[1], cost, head_s, True))
            rows_out.append(r)
            label = f"w{shape[0]} d{shape[1]} n{shape[2]}"
            print(f"{label:14} {name:7} {r['tau']:5.2f} {rows:4d} {r['speedup']:7.2f} {r['speedup_linear']:7.2f}")
    print("target pass ms by query rows:", {k: round(v * 1e3, 1) for k, v in cost.items()},
          f"head step {head_s * 1e3:.2f} ms")
    result = {"args": vars(args), "pass_s": cost, "head_step_s": head_s, "shapes": rows_out}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
