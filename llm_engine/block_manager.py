"""Paged-KV block accounting: free list, reference counts, automatic prefix caching.

A full block is identified by hash(parent block's hash, its token ids): a new request
reuses every cached block of its longest matching prefix. A freed block keeps its hash
(and its K/V) until the free list hands it out again, least recently freed first, so a
voice session's next turn finds the whole previous conversation still cached.
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
        b.hash, b.token_ids, b.ref_count = None, b"", 1
        return bid

    def _ref(self, bid: int) -> None:
        b = self.blocks[bid]
        if b.ref_count == 0:
            del self.free[bid]
        b.ref_count += 1

    def match_prefix(self, seq: Sequence) -> None:
        """At admission: attach every cached full block of seq's prefix (leaving at least one
        token to compute, which yields the next-token logits)."""
        if not self.prefix_caching or seq.block_table:
            return
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
        seq.num_computed_tokens = seq.num_cached_tokens = len(seq.block_table) * bs
        self.num_hits += seq.num_cached_tokens

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
        for bid in reversed(seq.block_table):
            self._unref(bid)
        seq.block_table = []
        seq.num_computed_tokens = 0

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
