from __future__ import annotations

import weakref
from collections import OrderedDict

import numpy as np
import xxhash

from nvllm.attention.paging import blocks_for
from nvllm.scheduler.sequence import Sequence


def chain_hash(parent_hash: int, token_ids: list[int] | np.ndarray) -> int:
    """xxhash64 of a full block, chained over its parent so equal blocks under different prefixes differ."""
    hasher = xxhash.xxh64(parent_hash.to_bytes(8, "little"))
    hasher.update(np.asarray(token_ids, dtype=np.int64).tobytes())
    return hasher.intdigest()


class Block:
    def __init__(self, block_id: int):
        self.block_id = block_id
        self.ref_count = 0
        self.hash: int | None = None  # set once the block is full of computed KV
        self.token_ids: tuple[int, ...] = ()


class BlockManager:
    """Paged KV-cache bookkeeping: ref-counted blocks, an LRU free list, and the prefix cache.

    A block whose ref count drops to zero keeps its hash and contents until it is reused, so a later request
    with the same prefix can take it back (a prefix-cache hit) instead of recomputing it.
    """

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True):
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free_block_ids: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self.hash_to_block_id: dict[int, int] = {}
        # `can_allocate` and then `allocate` look the same prefix up: the second takes the first's hits
        # (sequence, its length, `_num_hash_changes` then, hits) while no block was published or reused
        self._num_hash_changes = 0
        self._last_lookup: tuple[weakref.ref, int, int, list[int]] | None = None
        self.num_queried_tokens = 0  # prompt tokens looked up in the prefix cache
        self.num_hit_tokens = 0  # of those, tokens found there

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_block_ids)

    @property
    def prefix_hit_rate(self) -> float:
        return self.num_hit_tokens / self.num_queried_tokens if self.num_queried_tokens else 0.0

    def blocks_for(self, num_tokens: int) -> int:
        return blocks_for(num_tokens, self.block_size)

    def slots(self, block_tables: np.ndarray, rows: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """KV-cache slots (block id * block_size + offset) of the tokens at `positions` of the sequences
        whose block tables are rows `rows` of `block_tables` (`rows` and `positions` broadcast)."""
        blocks = block_tables[rows, positions // self.block_size].astype(np.int64)
        return blocks * self.block_size + positions % self.block_size

    def block_hashes(self, seq: Sequence, num_blocks: int) -> list[int]:
        """The chained hashes of the sequence's first `num_blocks` blocks (full ones), each computed once:
        they are kept in `seq.block_hashes`, valid for good since a sequence's tokens are only appended to."""
        hashes = seq.block_hashes
        if len(hashes) < num_blocks:
            size, start = self.block_size, len(hashes)
            assert seq.host_len >= num_blocks * size, "only full blocks have a hash"
            # one conversion of the new blocks' tokens, not one per block
            tokens = np.asarray(seq.token_ids[start * size : num_blocks * size], dtype=np.int64)
            parent = hashes[-1] if hashes else 0
            for offset in range(0, len(tokens), size):
                parent = chain_hash(parent, tokens[offset : offset + size])
                hashes.append(parent)
        return hashes[:num_blocks]

    def _cached_prefix(self, seq: Sequence) -> list[int]:
        """Block ids holding this sequence's leading full blocks (a list not to be changed). At least one
        token is always left to compute, since the step that computes it is the one that yields the next
        token's logits."""
        if not self.enable_prefix_caching:
            return []
        last = self._last_lookup
        if last is not None and last[0]() is seq and last[1:3] == (seq.host_len, self._num_hash_changes):
            return last[3]
        hits = []
        num_full_blocks = (seq.host_len - 1) // self.block_size
        if seq.first_prompt_logits_position is not None:
            # cached blocks hold no logits: a prompt whose log-probabilities are asked for computes the
            # positions that give them (vLLM skips the cache for such requests)
            num_full_blocks = min(num_full_blocks, seq.first_prompt_logits_position // self.block_size)
        for i, block_hash in enumerate(self.block_hashes(seq, num_full_blocks)):
            block_id = self.hash_to_block_id.get(block_hash)
            if block_id is None:
                break
            tokens = tuple(seq.token_ids[i * self.block_size : (i + 1) * self.block_size])
            if self.blocks[block_id].token_ids != tokens:  # a hash collision
                break
            hits.append(block_id)
        self._last_lookup = (weakref.ref(seq), seq.host_len, self._num_hash_changes, hits)
        return hits

    def can_allocate(self, seq: Sequence) -> bool:
        hits = self._cached_prefix(seq)
        hits_in_use = sum(1 for block_id in hits if self.blocks[block_id].ref_count > 0)
        needed = self.blocks_for(seq.host_len) - hits_in_use + len(seq.forks) * self._fork_blocks(seq)
        return needed <= self.num_free_blocks

    def _fork_blocks(self, seq: Sequence) -> int:
        """Blocks a fork of `seq` needs of its own once the prompt is computed: a copy of the prompt's last
        block where the prompt ends inside it (its next token's K/V goes there); full blocks are shared."""
        return 1 if seq.num_prompt_tokens % self.block_size else 0

    def allocate(self, seq: Sequence) -> None:
        """Blocks for all of `seq`'s tokens: cached prefix blocks shared, the rest fresh; and for each of its
        forks, the block it copies the prompt's last one into (see `fork`)."""
        assert not seq.block_table, "sequence already holds blocks"
        hits = self._cached_prefix(seq)
        for block_id in hits:
            block = self.blocks[block_id]
            if block.ref_count == 0:
                del self.free_block_ids[block_id]
            block.ref_count += 1
        seq.block_table = list(hits)
        seq.computed_len = seq.cached_len = len(hits) * self.block_size
        seq.num_registered_blocks = len(hits)
        self.num_queried_tokens += seq.host_len
        self.num_hit_tokens += seq.cached_len
        self._grow(seq, self.blocks_for(seq.host_len))
        for fork in seq.forks:
            self._grow(fork, self._fork_blocks(seq))

    def fork(self, parent: Sequence, child: Sequence) -> tuple[int, int] | None:
        """Give `child` (a fork `allocate` reserved a block for) the KV of `parent`'s computed prompt: the
        full blocks shared (ref-counted), the last one, where the prompt ends inside it, copied into its own
        block on write. Returns that copy (source block, destination block), which must run on the device
        before the child's first step, or None."""
        num_full = parent.num_prompt_tokens // self.block_size
        shared = parent.block_table[:num_full]
        for block_id in shared:
            self.blocks[block_id].ref_count += 1
        own = child.block_table
        child.block_table = shared + own
        child.num_registered_blocks = num_full  # the parent publishes them
        child.block_hashes = parent.block_hashes[:num_full]  # of the same prompt tokens
        child.cached_len = parent.cached_len
        return (parent.block_table[num_full], own[0]) if own else None

    def num_new_blocks(self, seq: Sequence, num_steps: int = 1) -> int:
        """Blocks the sequence lacks for `num_steps` decode steps: the KV of its newest token (on the device)
        and of the `num_steps - 1` it samples next."""
        return max(0, self.blocks_for(seq.device_len + num_steps - 1) - len(seq.block_table))

    def can_append(self, seq: Sequence, num_steps: int = 1) -> bool:
        return self.num_new_blocks(seq, num_steps) <= self.num_free_blocks

    def append_slots(self, seq: Sequence, num_steps: int = 1) -> None:
        self._grow(seq, len(seq.block_table) + self.num_new_blocks(seq, num_steps))

    def max_decode_steps(self, seq: Sequence) -> int:
        """Decode steps the sequence's blocks and the free ones hold."""
        room = (len(seq.block_table) + self.num_free_blocks) * self.block_size
        return room - seq.device_len + 1

    def _grow(self, seq: Sequence, num_blocks: int) -> None:
        while len(seq.block_table) < num_blocks:
            block_id, _ = self.free_block_ids.popitem(last=False)  # least recently freed first
            block = self.blocks[block_id]
            if block.hash is not None:
                self._num_hash_changes += 1
                if self.hash_to_block_id.get(block.hash) == block_id:
                    del self.hash_to_block_id[block.hash]  # its old contents are about to be overwritten
            block.hash, block.token_ids, block.ref_count = None, (), 1
            seq.block_table.append(block_id)

    def mark_computed(self, seq: Sequence, computed_len: int) -> None:
        """The sequence's first `computed_len` tokens have their K/V in the cache now: publish blocks that
        just became full of computed KV, so later requests can hit them."""
        seq.computed_len = computed_len
        if not self.enable_prefix_caching:
            return
        num_full = seq.computed_len // self.block_size
        if num_full <= seq.num_registered_blocks:
            return
        hashes = self.block_hashes(seq, num_full)
        self._num_hash_changes += 1
        for i in range(seq.num_registered_blocks, num_full):
            block = self.blocks[seq.block_table[i]]
            block.hash = hashes[i]
            block.token_ids = tuple(seq.token_ids[i * self.block_size : (i + 1) * self.block_size])
            self.hash_to_block_id.setdefault(block.hash, block.block_id)
        seq.num_registered_blocks = num_full

    def reset_prefix_cache(self) -> bool:
        """Forget every cached prefix (vLLM's `reset_prefix_cache`), so that later prompts are computed in
        full; refused (False) while a sequence holds blocks, whose published hashes it may still extend."""
        if self.num_free_blocks < self.num_blocks:
            return False
        for block in self.blocks:
            block.hash, block.token_ids = None, ()
        self.hash_to_block_id.clear()
        self._num_hash_changes += 1
        return True

    def free(self, seq: Sequence) -> None:
        """Give the sequence's blocks back: none of its K/V is left (a preempted one is recomputed)."""
        # The tail is released first, so it is reused first and shared prefixes live longest.
        for block_id in reversed(seq.block_table):
            block = self.blocks[block_id]
            block.ref_count -= 1
            if block.ref_count == 0:
                self.free_block_ids[block_id] = None
        seq.block_table = []
        seq.num_registered_blocks = seq.computed_len = 0
