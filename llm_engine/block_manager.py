"""Paged-KV block accounting: free list, reference counts, automatic prefix caching.

A full block is identified by hash(parent block's hash, its token ids): a new request
reuses every cached block of its longest matching prefix. A freed block keeps its hash
(and its K/V) until the free list hands it out again, least recently freed first, so a
voice session's next turn finds the whole previous conversation still cached.

A freed sequence's last, partly filled block is kept too, as the *tail* of its parent full
block: a request that continues the same full blocks with the same first tokens copies it
and computes only from where the two part. Token-granular reuse matters to a voice turn: the
turn detector's score of "history + the user's words" ends mid-block, and the reply's prompt
is that plus the chat template's 6 tokens that close the message and open the reply. With
full blocks alone the reply prefilled up to 15 of the user's tokens again (~7.6 ms each at one
Zen 1 core), after the score had just computed them.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from dataclasses import dataclass

from llm_engine.sequence import Sequence
from parley.errors import KVCacheFullError


@dataclass
class Block:
    block_id: int
    ref_count: int = 0
    hash: int | None = None
    token_ids: bytes = b""  # the tokens behind `hash` (block_key; checked on every hit)
    is_tail: bool = False  # freed with valid K/V in its first rows: BlockManager.tails[tail_parent]
    tail_parent: int | None = None


def block_key(token_ids: list[int]) -> bytes:
    """A full block's tokens as int32 bytes: 64 bytes for 16 tokens, where a tuple kept ~630 (its
    own slots and the int objects it keeps alive) for every cached block, ~0.6 MB over the
    cache, filled a few blocks a turn over a long session."""
    return array("i", token_ids).tobytes()


def chain_hash(parent: int | None, key: bytes) -> int:
    return hash((parent, key))


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True) -> None:
        self.block_size = block_size
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))
        self.cached: dict[int, int] = {}  # hash -> block id
        self.prefix_caching = enable_prefix_caching
        self.num_hits = 0  # tokens served from the prefix cache (all time)
        # parent full block's chain hash (None: the first block) -> (a free block, the tokens of
        # its valid rows); one per parent, the newest
        self.tails: dict[int | None, tuple[int, array]] = {}

    @property
    def num_free_blocks(self) -> int:
        return len(self.free)

    def blocks_needed(self, seq: Sequence, num_tokens: int) -> int:
        """New blocks seq needs to hold num_tokens tokens in total."""
        return max(0, -(-num_tokens // self.block_size) - len(seq.block_table))

    def can_allocate(self, seq: Sequence, num_tokens: int) -> bool:
        return self.blocks_needed(seq, num_tokens) <= self.num_free_blocks

    def _take_free(self) -> int:
        bid, _ = self.free.popitem(last=False)
        b = self.blocks[bid]
        if b.hash is not None and self.cached.get(b.hash) == bid:
            del self.cached[b.hash]
        if b.is_tail:
            if self.tails.get(b.tail_parent, (None,))[0] == bid:
                del self.tails[b.tail_parent]
            b.is_tail = False
        b.hash, b.token_ids, b.ref_count = None, b"", 1
        return bid

    def _ref(self, bid: int) -> None:
        b = self.blocks[bid]
        if b.ref_count == 0:
            del self.free[bid]
        b.ref_count += 1

    def match_prefix(self, seq: Sequence) -> list[tuple[int, int]]:
        """At admission: attach every cached full block of seq's prefix, then a copy of the
        tail that continues it (leaving at least one token to compute, which yields the
        next-token logits). Returns the (src, dst) block pairs the caller must copy in the KV
        cache before the next forward pass (the tail's; [] when none matched)."""
        if not self.prefix_caching or seq.block_table:
            return []
        bs, parent = self.block_size, None
        for i in range((len(seq.token_ids) - 1) // bs):
            toks = block_key(seq.token_ids[i * bs : (i + 1) * bs])
            h = chain_hash(parent, toks)
            bid = self.cached.get(h)
            if bid is None or self.blocks[bid].token_ids != toks:
                break
            self._ref(bid)
            seq.block_table.append(bid)
            parent = h
        n = len(seq.block_table) * bs
        k, copies = self._match_tail(seq, parent, n)
        seq.num_computed_tokens = seq.num_cached_tokens = n + k
        self.num_hits += seq.num_cached_tokens
        return copies

    def _match_tail(self, seq: Sequence, parent: int | None, start: int) -> tuple[int, list[tuple[int, int]]]:
        """Copy the tail of `parent` into a new block of seq when its first tokens continue
        seq's prompt at `start`: -> (the tokens it brings, the copy)."""
        tail = self.tails.get(parent)
        if tail is None or len(self.free) < 2:  # the tail's own block is one of the free ones
            return 0, []
        src, toks = tail
        want = seq.token_ids[start: len(seq.token_ids) - 1]
        k = next((i for i, (a, b) in enumerate(zip(toks, want)) if a != b), min(len(toks), len(want)))
        if k == 0:
            return 0, []
        del self.free[src]  # not handed out as the copy's own block; it goes back as the newest
        dst = self._take_free()
        self.free[src] = None
        seq.block_table.append(dst)
        return k, [(src, dst)]

    def allocate(self, seq: Sequence, num_tokens: int) -> bool:
        """Grow seq's table to hold num_tokens tokens; False (nothing taken) if not enough."""
        need = self.blocks_needed(seq, num_tokens)
        if need > self.num_free_blocks:
            return False
        seq.block_table.extend(self._take_free() for _ in range(need))
        return True

    def commit_full_blocks(self, seq: Sequence) -> None:
        """Register the hashes of seq's blocks that are now full of computed tokens."""
        if not self.prefix_caching:
            return
        bs = self.block_size
        parent = None
        for i in range(seq.num_computed_tokens // bs):
            b = self.blocks[seq.block_table[i]]
            if b.hash is None:
                b.token_ids = block_key(seq.token_ids[i * bs : (i + 1) * bs])
                b.hash = chain_hash(parent, b.token_ids)
                self.cached.setdefault(b.hash, b.block_id)
            parent = b.hash

    def free_seq(self, seq: Sequence) -> None:
        # Release in reverse so a sequence's tail blocks are reused before its shared prefix.
        tail = self._tail_of(seq)
        for bid in reversed(seq.block_table):
            self._unref(bid)
        if tail is not None and self.blocks[tail[0]].ref_count == 0:
            self._keep_tail(*tail)
        seq.block_table = []
        seq.num_computed_tokens = 0

    def _tail_of(self, seq: Sequence) -> tuple[int, int | None, array] | None:
        """seq's partly computed last block, its parent's chain hash and its computed tokens."""
        i, r = divmod(seq.num_computed_tokens, self.block_size)
        if not self.prefix_caching or r == 0 or i >= len(seq.block_table):
            return None
        parent = self.blocks[seq.block_table[i - 1]].hash if i else None
        if i and parent is None:  # the full block before it was never committed
            return None
        return seq.block_table[i], parent, array("i", seq.token_ids[i * self.block_size: seq.num_computed_tokens])

    def _keep_tail(self, bid: int, parent: int | None, toks: array) -> None:
        old = self.tails.get(parent)
        if old is not None:
            self.blocks[old[0]].is_tail = False
        b = self.blocks[bid]
        b.is_tail, b.tail_parent = True, parent
        self.tails[parent] = (bid, toks)

    def _unref(self, bid: int) -> None:
        b = self.blocks[bid]
        b.ref_count -= 1
        if b.ref_count == 0:
            self.free[bid] = None

    def truncate(self, seq: Sequence, length: int) -> list[tuple[int, int]]:
        """Roll seq back to its first `length` tokens (speculative rejection): free the blocks
        past it and un-hash the kept tail block. A shared tail block is copied first (returned
        as (src, dst) block pairs the caller must copy in the KV cache)."""
        if length < 0 or length > len(seq.token_ids):
            raise ValueError(f"cannot truncate a {len(seq)}-token sequence to {length}")
        keep = -(-length // self.block_size)
        for bid in seq.block_table[keep:]:
            self._unref(bid)
        del seq.block_table[keep:]
        del seq.token_ids[length:]
        seq.num_computed_tokens = min(seq.num_computed_tokens, length)
        copies = []
        if keep and length % self.block_size:
            bid = seq.block_table[-1]
            b = self.blocks[bid]
            if b.ref_count > 1:
                if not self.free:
                    raise KVCacheFullError("no free block for copy-on-write while truncating")
                new = self._take_free()
                self._unref(bid)
                seq.block_table[-1] = new
                copies.append((bid, new))
            elif b.hash is not None:
                if self.cached.get(b.hash) == bid:
                    del self.cached[b.hash]
                b.hash, b.token_ids = None, b""
        return copies

    def slot(self, seq: Sequence, position: int) -> int:
        return seq.block_table[position // self.block_size] * self.block_size + position % self.block_size
