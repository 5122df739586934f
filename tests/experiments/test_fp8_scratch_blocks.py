"""The study of the scratch blocks an fp8 cache hands flash-attn, on hand-countable tables."""

from experiments.studies.fp8_scratch_blocks import scratch_blocks, tables_under_a_prefix


def test_tables_under_a_prefix_share_its_blocks_and_own_the_rest():
    tables, lengths = tables_under_a_prefix(rows=3, prefix_len=512, most_own=300)
    assert (tables[:, :2] == [1, 2]).all()  # the prefix's two blocks, block 0 the padding
    own = tables[:, 2:][tables[:, 2:] > 0]
    assert len(set(own.tolist())) == len(own)  # no block of its own is another row's
    assert ((lengths > 512) & (lengths <= 812)).all()


def test_scratch_counts_each_entry_before_and_each_distinct_block_once():
    tables, _ = tables_under_a_prefix(rows=4, prefix_len=512, most_own=200)
    # 4 rows x 3 columns: the prefix's 2 blocks named 4 times each, 4 blocks of their own
    assert scratch_blocks(tables, max_seqlen_k=512 + 200) == (12, 6)
    # only the prefix's columns reached: 8 entries, 2 distinct blocks
    assert scratch_blocks(tables, max_seqlen_k=512) == (8, 2)


def test_a_cascade_plan_numbers_only_the_blocks_its_prefix_chunks_read():
    import numpy as np

    from experiments.studies.fp8_scratch_blocks import BLOCK
    from nvllm.attention.cascade import plan_cascade

    tables, lengths = tables_under_a_prefix(rows=6, prefix_len=1536, most_own=600)
    plan = plan_cascade(tables, lengths[None, :].astype(np.int32), BLOCK, "on")
    read = plan.prefix_scratch_sources[: int(plan.prefix_scratch_count)]
    assert sorted(read.tolist()) == [1, 2, 3, 4, 5, 6]  # the prefix's six blocks, once each, nothing else
