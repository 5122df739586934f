"""BlockManager: block accounting, the xxhash-chained prefix cache, its LRU reuse, prefix hits end to end."""

import struct

import pytest
import xxhash

from nvllm import SamplingParams
from nvllm.scheduler.block_manager import BlockManager, chain_hash
from nvllm.scheduler.sequence import Sequence
from tests.helpers.engine_utils import random_prompt, tiny_llm

BLOCK_SIZE = 4


def make_seq(token_ids: list[int]) -> Sequence:
    return Sequence(token_ids, SamplingParams(temperature=0))


def compute(manager: BlockManager, seq: Sequence, num_tokens: int | None = None) -> None:
    """What a step does to the cache bookkeeping: `num_tokens` more tokens (default: all) have KV."""
    manager.mark_computed(
        seq, seq.computed_len + (seq.num_uncomputed_tokens if num_tokens is None else num_tokens)
    )


def hand_hash(parent: int, token_ids: list[int]) -> int:
    """The documented layout: parent as 8 little-endian bytes, then each token as a little-endian int64."""
    return xxhash.xxh64_intdigest(struct.pack("<Q", parent) + struct.pack(f"<{len(token_ids)}q", *token_ids))


def hand_chain(token_ids: list[int]) -> list[int]:
    hashes, parent = [], 0
    for start in range(0, len(token_ids) - len(token_ids) % BLOCK_SIZE, BLOCK_SIZE):
        parent = hand_hash(parent, token_ids[start : start + BLOCK_SIZE])
        hashes.append(parent)
    return hashes


def test_allocate_and_free_account_every_block():
    manager = BlockManager(num_blocks=8, block_size=BLOCK_SIZE)
    seq = make_seq(list(range(10)))  # 3 blocks: 4 + 4 + 2
    assert manager.can_allocate(seq)
    manager.allocate(seq)
    assert len(seq.block_table) == 3 and len(set(seq.block_table)) == 3
    assert manager.num_free_blocks == 5
    assert not set(seq.block_table) & set(manager.free_block_ids)
    assert [manager.blocks[b].ref_count for b in seq.block_table] == [1, 1, 1]
    assert seq.computed_len == seq.cached_len == 0

    compute(manager, seq)
    seq.token_ids += [10, 11]  # two decode tokens fill block 3; the third needs a fourth block
    assert manager.can_append(seq)
    manager.append_slots(seq)
    assert len(seq.block_table) == 3 and manager.num_free_blocks == 5
    seq.token_ids.append(12)
    manager.append_slots(seq)
    assert len(seq.block_table) == 4 and manager.num_free_blocks == 4
    manager.append_slots(seq, 4)  # a decode round of 4 steps writes positions 12..15: still 4 blocks
    assert len(seq.block_table) == 4
    assert manager.can_append(seq, 20) and not manager.can_append(seq, 21)  # positions 12..32: 9 blocks
    manager.append_slots(seq, 5)  # position 16 needs a fifth
    assert len(seq.block_table) == 5 and manager.num_free_blocks == 3

    block_ids = list(seq.block_table)
    manager.free(seq)
    assert seq.block_table == []
    assert manager.num_free_blocks == 8
    assert all(manager.blocks[b].ref_count == 0 for b in block_ids)


def test_can_allocate_and_can_append_respect_free_blocks():
    manager = BlockManager(num_blocks=3, block_size=BLOCK_SIZE)
    assert not manager.can_allocate(make_seq(list(range(13))))  # 4 blocks
    fits = make_seq(list(range(12)))  # exactly 3
    assert manager.can_allocate(fits)
    manager.allocate(fits)
    assert manager.num_free_blocks == 0
    compute(manager, fits)
    fits.token_ids.append(99)  # the 13th token needs a 4th block
    assert not manager.can_append(fits)


def test_chain_hash_matches_hand_computed_xxhash():
    tokens = [151643, 0, 7, 2**31 + 5]
    assert chain_hash(0, tokens) == hand_hash(0, tokens)
    parent = chain_hash(0, tokens)
    assert chain_hash(parent, [1, 2, 3, 4]) == hand_hash(parent, [1, 2, 3, 4])
    assert chain_hash(parent, [1, 2, 3, 4]) != chain_hash(0, [1, 2, 3, 4])


def test_registered_blocks_carry_the_chained_hash_of_their_prefix():
    manager = BlockManager(num_blocks=16, block_size=BLOCK_SIZE)
    tokens = [5, 6, 7, 8, 9, 9, 9, 9, 1, 2]  # two full blocks and a partial one
    seq = make_seq(tokens)
    manager.allocate(seq)
    compute(manager, seq, 6)  # block 0 full, block 1 half computed
    assert manager.blocks[seq.block_table[0]].hash == hand_chain(tokens)[0]
    assert manager.blocks[seq.block_table[1]].hash is None
    compute(manager, seq)
    hashes = [manager.blocks[b].hash for b in seq.block_table]
    assert hashes == hand_chain(tokens) + [None]  # a partial block is never published
    assert {manager.hash_to_block_id[h] for h in hashes[:2]} == set(seq.block_table[:2])


def test_block_hashes_kept_on_a_growing_sequence_and_its_fork_are_its_chain():
    manager = BlockManager(num_blocks=16, block_size=BLOCK_SIZE)
    seq = make_seq([7, 1, 7, 2, 7, 3])
    assert manager.block_hashes(seq, 1) == hand_chain(seq.token_ids)[:1]
    seq.token_ids.extend([8, 8, 9, 9, 9])  # blocks 1 and 2 fill after block 0 was hashed
    assert manager.block_hashes(seq, 2) == hand_chain(seq.token_ids)[:2]
    seq.token_ids.append(10)
    assert manager.block_hashes(seq, 3) == hand_chain(seq.token_ids)
    assert manager.block_hashes(seq, 1) == hand_chain(seq.token_ids)[:1]

    parent = make_seq([5, 6, 7, 8, 1, 2, 3, 4, 9, 9])  # two full prompt blocks and a partial one
    fork = make_seq(parent.token_ids)
    parent.forks = [fork]
    manager.allocate(parent)
    compute(manager, parent, 4)  # block 0 published: the parent's chain known that far only
    compute(manager, parent)
    manager.fork(parent, fork)
    parent.token_ids.extend([1, 5])
    fork.token_ids.extend([2, 3])  # the fork's third block differs from its parent's
    assert manager.block_hashes(fork, 3) == hand_chain(fork.token_ids)
    assert manager.block_hashes(parent, 3) == hand_chain(parent.token_ids)


def test_allocate_sees_blocks_published_or_reused_after_can_allocate():
    manager = BlockManager(num_blocks=8, block_size=BLOCK_SIZE)
    prompt = list(range(600, 608))
    first, holder = make_seq(prompt + [1]), make_seq([1, 2])
    manager.allocate(first)
    manager.allocate(holder)
    waiting = make_seq(prompt + [0])
    assert manager.can_allocate(waiting)  # nothing cached yet
    compute(manager, first)  # publishes the two blocks `waiting` starts with
    manager.allocate(waiting)
    assert waiting.block_table[:2] == first.block_table[:2] and waiting.cached_len == 8
    manager.free(waiting)
    manager.free(first)

    again = make_seq(prompt + [2])
    assert manager.can_allocate(again)  # would hit both blocks
    holder.token_ids.extend(range(30))  # grows into every free block, the cached ones too
    manager.append_slots(holder)
    assert manager.num_free_blocks == 0
    manager.free(holder)
    manager.allocate(again)
    assert again.cached_len == 0


def test_same_block_under_a_different_prefix_is_a_different_block():
    manager = BlockManager(num_blocks=16, block_size=BLOCK_SIZE)
    first = make_seq([1, 2, 3, 4, 9, 9, 9, 9, 0])
    manager.allocate(first)
    compute(manager, first)
    second = make_seq([5, 6, 7, 8, 9, 9, 9, 9, 0])  # block 1 has the same tokens, block 0 does not
    manager.allocate(second)
    assert second.cached_len == 0
    assert not set(second.block_table) & set(first.block_table)
    compute(manager, second)
    first_hash, second_hash = (manager.blocks[s.block_table[1]].hash for s in (first, second))
    assert first_hash != second_hash
    assert second_hash == hand_chain(second.token_ids)[1]


def test_second_request_shares_cached_prefix_blocks():
    manager = BlockManager(num_blocks=16, block_size=BLOCK_SIZE)
    first = make_seq(list(range(100, 112)))  # 3 full blocks
    manager.allocate(first)
    compute(manager, first)
    second = make_seq(list(range(100, 108)) + [1, 2, 3, 4, 5])  # the first 2 blocks in common
    assert manager.can_allocate(second)
    manager.allocate(second)
    assert second.block_table[:2] == first.block_table[:2]
    assert [manager.blocks[b].ref_count for b in second.block_table] == [2, 2, 1, 1]
    assert not set(second.block_table[2:]) & set(first.block_table)
    assert second.cached_len == second.computed_len == 8
    assert second.num_uncomputed_tokens == 5
    assert (manager.num_queried_tokens, manager.num_hit_tokens) == (12 + 13, 8)
    assert manager.prefix_hit_rate == pytest.approx(8 / 25)
    assert manager.num_free_blocks == 16 - 3 - 2

    manager.free(first)  # the shared blocks stay with the second request
    assert [manager.blocks[b].ref_count for b in second.block_table] == [1, 1, 1, 1]
    assert manager.num_free_blocks == 16 - 4
    manager.free(second)
    assert manager.num_free_blocks == 16


def test_a_full_hit_still_leaves_one_token_to_compute():
    manager = BlockManager(num_blocks=16, block_size=BLOCK_SIZE)
    prompt = list(range(200, 212))  # exactly 3 full blocks
    first = make_seq(prompt)
    manager.allocate(first)
    compute(manager, first)
    cached = list(first.block_table)
    manager.free(first)

    again = make_seq(prompt)
    manager.allocate(again)
    assert again.cached_len == 8  # the last block is recomputed: its last token yields the logits
    assert again.block_table[:2] == cached[:2]
    assert again.num_uncomputed_tokens == 4

    manager.free(again)
    longer = make_seq(prompt + [7])  # 3 full cached blocks and one new token
    manager.allocate(longer)
    assert longer.cached_len == 12 and longer.num_uncomputed_tokens == 1


def test_freed_blocks_keep_their_hash_until_reused_least_recent_first():
    manager = BlockManager(num_blocks=4, block_size=BLOCK_SIZE)
    prompt = list(range(300, 312))
    first = make_seq(prompt + [0])  # 4 blocks; the first 3 full and published
    manager.allocate(first)
    compute(manager, first)
    cached, tail = first.block_table[:3], first.block_table[3]
    manager.free(first)
    assert manager.num_free_blocks == 4
    assert [manager.blocks[b].hash for b in cached] == hand_chain(prompt)  # still published

    # An unrelated 1-block request takes the block freed first: the tail, which held no full block.
    other = make_seq([1, 2])
    manager.allocate(other)
    assert other.block_table == [tail]
    assert [manager.hash_to_block_id.get(h) for h in hand_chain(prompt)] == cached

    manager.free(other)
    again = make_seq(prompt + [0])
    manager.allocate(again)
    assert again.block_table[:3] == cached and again.cached_len == 12


def test_reused_block_drops_its_stale_hash():
    manager = BlockManager(num_blocks=4, block_size=BLOCK_SIZE)
    prompt = list(range(400, 412))
    first = make_seq(prompt + [0])
    manager.allocate(first)
    compute(manager, first)
    cached = list(first.block_table[:3])
    manager.free(first)  # free list, least recent first: tail block, then cached[2], cached[1], cached[0]

    other = make_seq([1, 2, 3, 4, 5])  # two blocks: the tail and cached[2]
    manager.allocate(other)
    assert cached[2] in other.block_table
    reused = manager.blocks[cached[2]]
    assert reused.hash is None and reused.ref_count == 1
    stale = hand_chain(prompt)[2]
    assert stale not in manager.hash_to_block_id
    assert [manager.hash_to_block_id[h] for h in hand_chain(prompt)[:2]] == cached[:2]

    compute(manager, other)  # now the reused block holds `other`'s tokens
    manager.free(other)
    again = make_seq(prompt + [0])
    manager.allocate(again)
    assert again.cached_len == 8  # the first two blocks still hit; the overwritten third does not
    assert again.block_table[:2] == cached[:2]


def test_can_allocate_counts_cached_free_blocks_once():
    manager = BlockManager(num_blocks=4, block_size=BLOCK_SIZE)
    prompt = list(range(500, 508))
    first = make_seq(prompt + [0])  # 3 blocks, 2 published
    manager.allocate(first)
    compute(manager, first)
    manager.free(first)
    holder = make_seq([1, 2, 3, 4, 5])  # takes the 2 blocks that hold nothing cached
    manager.allocate(holder)
    assert manager.num_free_blocks == 2
    # 2 cached blocks (free) + 1 fresh one: the cached ones are all that is free, so it does not fit
    assert not manager.can_allocate(make_seq(prompt + [1, 2]))
    # 2 cached blocks + nothing new beyond them (8 tokens + 0 in a new block) does fit
    assert manager.can_allocate(make_seq(prompt))


def test_prefix_caching_disabled_never_hits():
    manager = BlockManager(num_blocks=8, block_size=BLOCK_SIZE, enable_prefix_caching=False)
    first = make_seq(list(range(9)))
    manager.allocate(first)
    compute(manager, first)
    assert all(manager.blocks[b].hash is None for b in first.block_table)
    second = make_seq(list(range(9)))
    manager.allocate(second)
    assert second.cached_len == 0 and not set(second.block_table) & set(first.block_table)


# ---- end to end: the engine's prefill computes only what the cache does not hold --------------------------
GREEDY = SamplingParams(temperature=0, max_tokens=4)


@pytest.fixture(scope="module")
def llm():
    with tiny_llm(kvcache_block_size=BLOCK_SIZE, num_kvcache_blocks=64, max_model_len=64) as engine:
        yield engine


@pytest.fixture(scope="module")
def uncached_llm():
    with tiny_llm(
        kvcache_block_size=BLOCK_SIZE, num_kvcache_blocks=64, max_model_len=64, enable_prefix_caching=False
    ) as engine:
        yield engine


def test_second_generate_prefills_only_new_tokens(llm, uncached_llm):
    first = random_prompt(21, seed=1)
    second = first[:16] + random_prompt(5, seed=2)
    manager = llm.block_manager

    prefill_before = llm.num_prefill_tokens
    first_out = llm.generate([first], GREEDY, use_tqdm=False)
    assert llm.num_prefill_tokens - prefill_before == 21

    prefill_before = llm.num_prefill_tokens
    hits_before, queried_before = manager.num_hit_tokens, manager.num_queried_tokens
    second_out = llm.generate([second], GREEDY, use_tqdm=False)
    assert llm.num_prefill_tokens - prefill_before == 5  # 4 blocks of 4 came from the cache
    assert manager.num_hit_tokens - hits_before == 16 and manager.num_queried_tokens - queried_before == 21
    assert llm.stats()["prefix_cache_hit_rate"] == pytest.approx((hits_before + 16) / (queried_before + 21))

    # Cached KV must give what computing everything gives.
    assert second_out == uncached_llm.generate([second], GREEDY, use_tqdm=False)
    assert first_out == uncached_llm.generate([first], GREEDY, use_tqdm=False)

    prefill_before = llm.num_prefill_tokens
    assert llm.generate([first], GREEDY, use_tqdm=False) == first_out  # a full hit
    assert llm.num_prefill_tokens - prefill_before == 1
    assert manager.num_free_blocks == manager.num_blocks


def test_concurrent_requests_share_prefix_blocks(llm, uncached_llm):
    shared = random_prompt(12, seed=3)
    prompts = [shared + random_prompt(3, seed=4), shared + random_prompt(6, seed=5)]
    llm.generate([shared], SamplingParams(temperature=0, max_tokens=1), use_tqdm=False)  # publish the prefix

    prefill_before = llm.num_prefill_tokens
    outputs = llm.generate(prompts, GREEDY, use_tqdm=False)
    assert llm.num_prefill_tokens - prefill_before == 3 + 6
    assert outputs == uncached_llm.generate(prompts, GREEDY, use_tqdm=False)


def test_full_hit_on_a_block_boundary_recomputes_the_last_block(llm, uncached_llm):
    prompt = random_prompt(5 * BLOCK_SIZE, seed=6)  # all blocks full: hitting them all would leave nothing
    first_out = llm.generate([prompt], GREEDY, use_tqdm=False)
    prefill_before = llm.num_prefill_tokens
    assert llm.generate([prompt], GREEDY, use_tqdm=False) == first_out
    assert llm.num_prefill_tokens - prefill_before == BLOCK_SIZE
    assert first_out == uncached_llm.generate([prompt], GREEDY, use_tqdm=False)


def test_reset_prefix_cache_recomputes_every_prompt_and_is_refused_while_blocks_are_held(llm):
    prompt = random_prompt(21, seed=7)
    first_out = llm.generate([prompt], GREEDY, use_tqdm=False)
    assert llm.reset_prefix_cache()
    prefill_before = llm.num_prefill_tokens
    assert llm.generate([prompt], GREEDY, use_tqdm=False) == first_out
    assert llm.num_prefill_tokens - prefill_before == 21  # nothing came from the cache

    manager = BlockManager(num_blocks=4, block_size=4)
    seq = make_seq(list(range(8)))
    manager.allocate(seq)
    compute(manager, seq)
    assert not manager.reset_prefix_cache() and manager.hash_to_block_id  # a sequence holds blocks
    manager.free(seq)
    assert manager.reset_prefix_cache() and not manager.hash_to_block_id
    again = make_seq(list(range(8)))
    assert manager.can_allocate(again)
    manager.allocate(again)
    assert again.computed_len == 0  # no hit
