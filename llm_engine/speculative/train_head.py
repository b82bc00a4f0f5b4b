"""Reproduce the shipped EAGLE head for SmolLM2-135M-Instruct on the CPU, from the target's own text.

    python -m llm_engine.speculative.train_head [--out DIR] [--chats 320] [--steps 500]

1. data: the target (transformers' GGUF loader, fp32) answers a seeded set of voice-assistant
   chats (half greedy, half sampled at T=0.7); one more forward pass records, for every
   position, the last decoder layer's output before the final norm (the feature the engine
   exposes) and the target's greedy next token.
2. train: AdamW on   L1(f_hat_{t+1}, f_{t+1}) + CE(lm_head(norm(f_hat_{t+1})), target argmax),
   the CE over the vocabulary seen in the data (a few thousand ids, ~10x cheaper than 49,152).
Seeded throughout (torch.manual_seed, fixed prompt order); one torch thread by default.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import torch
from torch.nn import functional as F

from llm_engine.speculative.head import EagleHead, HeadConfig

SYSTEM = "You are a helpful voice assistant. Answer in one or two short spoken sentences."
_ASKS = [
    "What's the weather like in {c} today?", "Set a timer for {n} minutes.",
    "Remind me to call {p} at {n} pm.", "How do I make {f}?", "Tell me a fun fact about {a}.",
    "What time is it in {c}?", "Can you recommend a good book about {t}?",
    "How far is {c} from {c2}?", "Explain {t} in simple terms.", "Play some {g} music.",
    "What should I cook for dinner with {f2}?", "Give me a quick tip for {t2}.",
    "Add {f2} to my shopping list.", "Why is the sky blue?", "How many legs does a {a} have?",
    "Translate 'good morning' into {l}.", "What is {n} times {n2}?",
    "Write a short poem about {a}.", "Who was {p2}?", "How do I get better at {t2}?",
    "Book a table for {n} at an Italian restaurant.", "What are the benefits of {t2}?",
    "Can you summarize the plot of {b}?", "Turn the living room lights {o}.",
]
_FILL = {
    "c": ["Paris", "Tokyo", "Chicago", "Berlin", "Sydney", "Toronto", "Madrid", "Cairo"],
    "c2": ["London", "Rome", "Boston", "Seoul", "Lima", "Oslo"],
    "n": ["5", "10", "3", "7", "12", "20", "4"], "n2": ["6", "8", "9", "11", "15"],
    "p": ["mom", "Sarah", "the dentist", "my boss", "Alex"],
    "p2": ["Marie Curie", "Albert Einstein", "Ada Lovelace", "Leonardo da Vinci", "Nikola Tesla"],
    "f": ["pancakes", "guacamole", "a smoothie", "fried rice", "tomato soup", "an omelette"],
    "f2": ["chicken and rice", "pasta", "eggs", "milk and bread", "potatoes", "apples"],
    "a": ["octopuses", "cats", "penguins", "elephants", "bees", "dolphins", "spider"],
    "t": ["black holes", "photosynthesis", "the stock market", "machine learning", "volcanoes",
          "the internet", "gravity", "climate change"],
    "t2": ["sleep", "running", "public speaking", "saving money", "meditation", "learning piano"],
    "g": ["jazz", "classical", "rock", "lo-fi", "pop"], "l": ["Spanish", "French", "German"],
    "b": ["Romeo and Juliet", "The Hobbit", "Moby Dick", "Pride and Prejudice"],
    "o": ["on", "off"],
}


def training_chats(n: int, seed: int) -> list[list[dict]]:
    """Seeded voice-assistant chats (one or two user turns), disjoint from the benchmark set."""
    rng = random.Random(seed)

    def ask() -> str:
        s = rng.choice(_ASKS)
        for key, vals in _FILL.items():
            while "{" + key + "}" in s:
                s = s.replace("{" + key + "}", rng.choice(vals), 1)
        return s

    chats = []
    for i in range(n):
        msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": ask()}]
        if i % 3 == 2:
            msgs += [{"role": "assistant", "content": "Sure, here you go."},
                     {"role": "user", "content": ask()}]
        chats.append(msgs)
    return chats


def load_target():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from parley.assets import model_path

    path = Path(model_path("smollm2-135m-instruct"))
    tok = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    return tok, model.eval()


@torch.inference_mode()
def generate_data(n_chats: int, max_new: int, seed: int, batch: int = 16, skip: int = 0) -> dict:
    """skip: chats already generated (a multiple of batch): resume a partial data cache."""
    tok, model = load_target()
    tok.padding_side = "left"
    feats, toks, labels = [], [], []
    captured = {}
    hook = model.model.norm.register_forward_hook(lambda m, i, o: captured.__setitem__("f", i[0]))
    chats = training_chats(n_chats, seed)
    t0 = time.time()
    for i in range(skip, len(chats), batch):
        torch.manual_seed(seed + i)
        texts = [tok.apply_chat_template(c, tokenize=False, add_generation_prompt=True)
                 for c in chats[i : i + batch]]
        enc = tok(texts, return_tensors="pt", padding=True)
        sample = (i // batch) % 2 == 1
        out = model.generate(**enc, max_new_tokens=max_new, do_sample=sample, temperature=0.7 if sample else None,
                             top_p=None, top_k=None, pad_token_id=tok.pad_token_id or 0)
        mask = torch.cat([enc.attention_mask, (out[:, enc.input_ids.shape[1]:] != -1).long()], 1)
        logits = model(input_ids=out, attention_mask=mask).logits  # [B, T, V]
        f = captured["f"]  # [B, T, D] pre-norm last hidden state
        for b in range(out.shape[0]):
            keep = mask[b].bool()
            ids = out[b][keep]
            eos = (ids[enc.attention_mask[b].sum():] == tok.eos_token_id).nonzero()
            end = int(enc.attention_mask[b].sum()) + (int(eos[0]) + 1 if len(eos) else max_new)
            toks.append(ids[:end].clone())
            feats.append(f[b][keep][:end].half().clone())
            labels.append(logits[b][keep][:end].argmax(-1).clone())
        print(f"data {i + batch}/{len(chats)} chats, {sum(len(t) for t in toks)} tokens, {time.time() - t0:.0f}s",
              flush=True)
    hook.remove()
    return {"tokens": toks, "features": feats, "labels": labels,
            "embed": model.model.embed_tokens.weight.detach().clone(),
            "norm": model.model.norm.weight.detach().clone(), "eps": model.config.rms_norm_eps}


def head_loss(head, data, idx, vocab, lm_sub, norm, eps):
    """Mean loss over sequences idx. Row t: (f_t, x_{t+1}) -> f_{t+1}; CE target: argmax at t+1."""
    total_l1 = total_ce = 0.0
    correct = count = 0
    for j in idx:
        x, f, y = data["tokens"][j], data["features"][j].float(), data["labels"][j]
        emb = data["embed"][x[1:]]  # [T-1, D]
        pred = head(f[:-1], emb, torch.arange(len(x) - 1))  # [T-1, D] predicts f_{1..T-1}
        l1 = F.smooth_l1_loss(pred, f[1:])
        h = pred.float() * torch.rsqrt(pred.float().pow(2).mean(-1, keepdim=True) + eps) * norm
        logits = h @ lm_sub.T  # [T-1, V_sub]
        tgt = vocab[y[1:]]
        ce = F.cross_entropy(logits, tgt)
        total_l1, total_ce = total_l1 + l1, total_ce + ce
        correct += int((logits.argmax(-1) == tgt).sum())
        count += len(tgt)
    n = len(idx)
    return total_l1 / n, total_ce / n, correct / max(count, 1)


def train(data: dict, steps: int, seed: int, lr: float = 3e-3, seqs_per_step: int = 8):
    torch.manual_seed(seed)
    head = EagleHead(HeadConfig())
    seen = torch.unique(torch.cat(data["labels"]))
    vocab = torch.full((data["embed"].shape[0],), -1, dtype=torch.long)
    vocab[seen] = torch.arange(len(seen))
    lm_sub = data["embed"][seen]  # tied LM head rows of the seen vocabulary
    n = len(data["tokens"])
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()
    val, tr = order[: max(n // 10, 1)], order[max(n // 10, 1):]
    opt = torch.optim.AdamW(head.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.05)
    rng = random.Random(seed)
    t0 = time.time()
    for step in range(steps):
        idx = rng.sample(tr, min(seqs_per_step, len(tr)))
        l1, ce, acc = head_loss(head, data, idx, vocab, lm_sub, data["norm"], data["eps"])
        loss = l1 + 0.1 * ce
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 25 == 0 or step == steps - 1:
            print(f"step {step} l1 {float(l1):.3f} ce {float(ce):.3f} top1 {acc:.3f} {time.time() - t0:.0f}s", flush=True)
    with torch.no_grad():
        _, vce, vacc = head_loss(head, data, val, vocab, lm_sub, data["norm"], data["eps"])
    return head, {"val_ce": float(vce), "val_top1": vacc, "train_seqs": len(tr), "val_seqs": len(val)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).parent / "weights"))
    ap.add_argument("--data-cache", default="", help="save/load the generated data here (.pt)")
    ap.add_argument("--chats", type=int, default=320)
    ap.add_argument("--max-new", type=int, default=80)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    cache = Path(args.data_cache) if args.data_cache else None
    data = torch.load(cache, weights_only=True) if cache and cache.exists() else None
    have = data["n_chats"] if data else 0
    if have < args.chats:  # generate the missing chats (seeded per batch: same as one long run)
        more = generate_data(args.chats, args.max_new, args.seed, skip=have)
        if data:
            for key in ("tokens", "features", "labels"):
                more[key] = data[key] + more[key]
        data = {**more, "n_chats": args.chats}
        if cache:
            torch.save(data, cache)
    # tensors made under inference_mode cannot enter autograd: plain copies for training
    data = {k: ([t.clone() for t in v] if isinstance(v, list) else v.clone() if torch.is_tensor(v) else v)
            for k, v in data.items() if k != "n_chats"}
    head, stats = train(data, args.steps, args.seed)
    from safetensors.torch import save_file

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in head.state_dict().items()}, out / "smollm2-135m-eagle.safetensors")
    stats.update(chats=args.chats, max_new=args.max_new, steps=args.steps, seed=args.seed,
                 tokens=sum(len(t) for t in data["tokens"]))
    (out / "smollm2-135m-eagle.json").write_text(json.dumps(stats, indent=2) + "\n")
    print(json.dumps(stats))


if __name__ == "__main__":
    main()
