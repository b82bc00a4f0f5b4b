"""Reproduce the shipped EAGLE head for SmolLM2-135M-Instruct on the CPU, from the target's own text.

    python -m llm_engine.speculative.train_head [--out DIR] [--chats 2560] [--self-chats 1280] [--steps 2400]
                                                [--data-cache F]

1. data (head_data.py): our engine answers a seeded set of voice-assistant chats (batches
   alternately greedy / sampled at T=0.7); one more pass records every position's feature.
2. train, in the target's post-norm feature space g (see head.py), two drafting steps per row
   ("training-time test"): step 1 maps (g_t, x_{t+1}) -> g_{t+1}; step 2 feeds its own
   prediction with x_{t+2}, attending the real rows <= t and itself (what drafting token 2
   sees), -> g_{t+2}. Loss per step: smooth-L1 on g + soft cross-entropy against the target's
   distribution (its LM head on the true g) over the draft vocabulary.
Seeded throughout (torch.manual_seed, fixed chat order); one torch thread by default.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections import Counter
from pathlib import Path

import torch
from torch.nn import functional as F

from llm_engine.speculative.head import EagleHead, HeadConfig
from llm_engine.speculative.head_data import generate_data, query_chats, self_queries, training_chats

SELF_SEED = 1_000_000  # seed offset of the self-written requests and their answers


def draft_vocab(data: dict, eos: list[int], size: int) -> torch.Tensor:
    """The ids the target emits in the replies, most frequent first (eos always in), <= size."""
    counts = Counter()
    for x, r0 in zip(data["tokens"], data["reply_start"]):
        counts.update(x[r0:].tolist())
    ids = [t for t, _ in counts.most_common()]
    ids = eos + [t for t in ids if t not in eos]
    return torch.tensor(sorted(ids[:size]))


def _step_loss(pred, g_true, w_sub):  # pred / g_true [N, D]; w_sub [Vd, D]
    l1 = F.smooth_l1_loss(pred, g_true)
    with torch.no_grad():
        teacher = torch.softmax(g_true @ w_sub.T, -1)  # [N, Vd]
    logits = pred @ w_sub.T
    ce = -(teacher * F.log_softmax(logits, -1)).sum(-1).mean()
    return l1, ce, logits


def two_step(head: EagleHead, g: torch.Tensor, emb: torch.Tensor):
    """g [T, D] true features, emb [T, D] token embeddings -> (o1 [T-1, D] ~ g[1:], o2 [T-2, D] ~ g[2:])."""
    t = g.shape[0]
    pos = torch.arange(t)
    x1, q1, k1, v1 = head.project(g[:-1], emb[1:], pos[:-1])
    causal = torch.ones(t - 1, t - 1, dtype=torch.bool).tril()
    o1 = head.attend(x1, q1, k1, v1, causal)
    x2, q2, k2, v2 = head.project(o1[:-1], emb[2:], pos[1:-1])
    n = t - 2
    # step-2 row i (position i+1) sees real rows j <= i and itself, never real row i+1
    mask = torch.cat([torch.ones(n, t - 1, dtype=torch.bool).tril(), torch.eye(n, dtype=torch.bool)], 1)
    o2 = head.attend(x2, q2, torch.cat([k1, k2]), torch.cat([v1, v2]), mask)
    return o1, o2


def normed(f: torch.Tensor, norm: torch.Tensor, eps: float) -> torch.Tensor:  # [T, D] pre-norm -> g
    f = f.float()
    return f * torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + eps) * norm


def head_loss(head, data, idx, tw, l1_weight: float = 1.0, step2_weight: float = 0.5):
    """Mean loss over sequences idx; also step-1 / step-2 top-1 agreement on reply rows."""
    total = 0.0
    hits = [0, 0]
    count = [0, 0]
    for j in idx:
        x, r0 = data["tokens"][j], data["reply_start"][j]
        g = normed(data["features"][j], tw["norm"], tw["eps"])
        o1, o2 = two_step(head, g, tw["embed"][x])
        for s, (o, tgt) in enumerate(((o1, g[1:]), (o2, g[2:]))):
            l1, ce, logits = _step_loss(o, tgt, tw["w_sub"])
            total = total + (1.0 if s == 0 else step2_weight) * (l1_weight * l1 + ce)
            # row predicting x_{i+2+s}: reply rows are those whose predicted token is in the reply
            lab = data["labels"][j][1 + s :]  # target's greedy token after position i+1+s
            pred = tw["vocab"][logits.argmax(-1)]
            sel = torch.arange(len(lab)) + 2 + s >= r0
            hits[s] += int((pred[sel] == lab[sel]).sum())
            count[s] += int(sel.sum())
    return total / len(idx), [h / max(c, 1) for h, c in zip(hits, count)]


def train(data: dict, tw: dict, steps: int, seed: int, lr: float = 2e-3, seqs_per_step: int = 8,
          l1_weight: float = 1.0, train_fraction: float = 1.0):
    """train_fraction < 1 trains on that share of the training chats (the held-out ones stay
    the same): the data-scaling probe of the model card."""
    torch.manual_seed(seed)
    head = EagleHead(HeadConfig(draft_vocab_size=len(tw["vocab"])))
    head.draft_vocab.copy_(tw["vocab"])
    n = len(data["tokens"])
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()
    val, tr = order[: max(n // 16, 1)], order[max(n // 16, 1):]
    tr = tr[: max(1, round(len(tr) * train_fraction))]  # order is already a seeded shuffle
    opt = torch.optim.AdamW(head.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.05)
    rng = random.Random(seed)
    t0 = time.time()
    for step in range(steps):
        loss, acc = head_loss(head, data, rng.sample(tr, min(seqs_per_step, len(tr))), tw, l1_weight)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 25 == 0 or step == steps - 1:
            print(f"step {step} loss {loss.item():.3f} top1 {acc[0]:.3f}/{acc[1]:.3f} {time.time() - t0:.0f}s",
                  flush=True)
    with torch.no_grad():
        _, vacc = head_loss(head, data, val, tw)
    return head, {"val_top1_step1_reply": vacc[0], "val_top1_step2_reply": vacc[1],
                  "train_seqs": len(tr), "val_seqs": len(val)}


def load_data(engine, path: Path | None, chats: list, max_new: int, seed: int, chunk: int = 160,
              writer=None) -> dict:
    """Generate (or resume from the cache at path) the data of `chats`, chunk by chunk;
    writer (default: engine) writes the replies, engine records the features."""
    data = torch.load(path, weights_only=True) if path and path.exists() else {"tokens": [], "features": [],
                                                                               "reply_start": [], "n_chats": 0}
    while data["n_chats"] < len(chats):
        n0 = data["n_chats"]
        n1 = min(len(chats), n0 + chunk)
        more = generate_data(writer or engine, chats[:n1], max_new, seed, skip=n0, feature_engine=engine)
        data = {**{k: data[k] + more[k] for k in ("tokens", "features", "reply_start")}, "n_chats": n1}
        if path:
            torch.save(data, path)
    return data


@torch.no_grad()
def prepare(engine, data: dict, vocab_size: int) -> tuple[dict, dict]:
    """Reply starts, the target's greedy labels, and the frozen target tensors the loss needs."""
    m = engine.model
    tw = {"norm": m.norm.detach().float().clone(), "eps": m.cfg.rms_norm_eps,
          "embed": m.embed_tokens.weight.detach().float().clone()}
    lm = m.lm_head.weight.detach().float()
    out = {"tokens": [t.clone() for t in data["tokens"]], "features": [f.clone() for f in data["features"]],
           "labels": [], "reply_start": list(data["reply_start"])}
    for f in out["features"]:
        out["labels"].append((normed(f, tw["norm"], tw["eps"]) @ lm.T).argmax(-1))
    tw["vocab"] = draft_vocab(out, sorted(engine.eos_token_ids), vocab_size)
    tw["w_sub"] = lm[tw["vocab"]].clone()
    return out, tw


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).parent / "weights"))
    ap.add_argument("--data-cache", default="", help="save/load the generated data here (.pt)")
    ap.add_argument("--chats", type=int, default=2560, help="template chats (head_data.training_chats)")
    ap.add_argument("--self-chats", type=int, default=1280, help="chats on requests the target writes itself "
                    "(head_data.self_queries; 0 gives the previous, template-only head)")
    ap.add_argument("--gen-weights", default="bf16", help="weight format of the engine writing the replies")
    ap.add_argument("--max-new", type=int, default=96)
    ap.add_argument("--steps", type=int, default=2400)
    ap.add_argument("--vocab", type=int, default=4096, help="draft vocabulary size (4,096: 97%% of reply tokens)")
    ap.add_argument("--l1-weight", type=float, default=1.0, help="feature loss weight (CE has 1)")
    ap.add_argument("--train-fraction", type=float, default=1.0,
                    help="train on this share of the training chats, same held-out chats (scaling probe)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    if not 0 < args.train_fraction <= 1:
        ap.error("--train-fraction must be in (0, 1]")
    torch.set_num_threads(args.threads)
    from llm_engine import LLMEngine

    engine = LLMEngine.from_pretrained(enable_prefix_caching=False)  # fp32: the default target
    writer = engine if args.gen_weights == "fp32" else LLMEngine.from_pretrained(
        enable_prefix_caching=False, weight_format=args.gen_weights)
    cache = Path(args.data_cache) if args.data_cache else None
    data = load_data(engine, cache, training_chats(args.chats, args.seed), args.max_new, args.seed, writer=writer)
    if args.self_chats:  # the target's own requests, answered like the templates' (other seeds)
        qpath = cache.with_name(cache.stem + "-queries.json") if cache else None
        if qpath and qpath.exists():
            queries = json.loads(qpath.read_text())
        else:
            queries = self_queries(writer, args.self_chats, args.seed + SELF_SEED)
            if qpath:
                qpath.write_text(json.dumps(queries, indent=0))
        more = load_data(engine, cache.with_name(cache.stem + "-self.pt") if cache else None, query_chats(queries),
                         args.max_new, args.seed + SELF_SEED, writer=writer)
        data = {k: data[k] + more[k] for k in ("tokens", "features", "reply_start")}
    data, tw = prepare(engine, data, args.vocab)
    head, stats = train(data, tw, args.steps, args.seed, l1_weight=args.l1_weight,
                        train_fraction=args.train_fraction)
    from safetensors.torch import save_file

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in head.state_dict().items()}, out / "smollm2-135m-eagle.safetensors")
    stats.update(chats=args.chats, self_chats=args.self_chats, gen_weights=args.gen_weights, max_new=args.max_new, steps=args.steps, seed=args.seed, l1_weight=args.l1_weight,
                 train_fraction=args.train_fraction,
                 draft_vocab=len(tw["vocab"]), tokens=sum(len(t) for t in data["tokens"]))
    (out / "smollm2-135m-eagle.json").write_text(json.dumps(stats, indent=2) + "\n")
    print(json.dumps(stats))


if __name__ == "__main__":
    main()
