"""Aborting one request gives its KV blocks and token-table rows back at once, wherever it is (waiting,
running with forks, in an overlapped decode round), and the other requests run on to their own tokens."""

from nvllm.sampling_params import SamplingParams
from tests.helpers.engine_utils import random_prompt, tiny_llm

GREEDY = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)


def test_abort_frees_blocks_and_rows_and_others_run_on():
    with tiny_llm(overlap_rounds=True, num_decode_steps=4, max_num_seqs=4) as llm:
        kept_prompt = random_prompt(40, seed=1)
        expected = llm.generate([kept_prompt], GREEDY, use_tqdm=False)[0].outputs[0].token_ids
        num_rows = len(llm.scheduler.lifecycle.token_rows.free_rows)
        kept = llm.add_request(kept_prompt, GREEDY)
        forked = llm.add_request(random_prompt(50, seed=2), SamplingParams(n=2, temperature=1, seed=3))
        forked_samples = [forked, *forked.forks]
        llm.step()  # the prefill of both: the forks start
        llm.step()  # a decode round, with the next one launched ahead (overlap)
        assert llm.in_flight is not None
        waiting = llm.add_request(random_prompt(30, seed=4), GREEDY)
        used_before = llm.block_manager.num_blocks - llm.block_manager.num_free_blocks
        llm.abort(forked_samples)
        llm.abort([waiting])
        used_after = llm.block_manager.num_blocks - llm.block_manager.num_free_blocks
        assert used_after == len(kept.block_table) < used_before
        assert len(llm.scheduler.lifecycle.token_rows.free_rows) == num_rows - 1
        assert all(seq.is_finished and seq.token_row is None for seq in forked_samples)
        assert not list(llm.scheduler.waiting)
        while not llm.is_finished():
            llm.step()
        assert kept.completion_token_ids == expected
        assert llm.block_manager.num_free_blocks == llm.block_manager.num_blocks


def test_abort_inside_a_round_handed_out_step_by_step():
    """A stream's round is handed out step by step (full rounds: `one_step_rounds_max_seqs=0`); aborting a
    request between two of its steps frees its blocks and row at once, and the other request takes the
    rest of the round and its own tokens."""
    with tiny_llm(num_decode_steps=4, max_num_seqs=4, scheduler__one_step_rounds_max_seqs=0) as llm:
        kept_prompt = random_prompt(40, seed=5)
        expected = llm.generate([kept_prompt], GREEDY, use_tqdm=False)[0].outputs[0].token_ids
        llm.set_streaming(True)
        try:
            kept = llm.add_request(kept_prompt, GREEDY)
            dropped = llm.add_request(random_prompt(30, seed=6), GREEDY)
            llm.step()  # the prefill of both
            llm.step()  # the first step of a 4-step round
            assert llm.in_hand is not None and llm.in_hand.launched.steps_taken == 1
            assert len(kept.completion_token_ids) == 2
            llm.abort([dropped])
            assert dropped.is_finished and dropped.token_row is None
            used = llm.block_manager.num_blocks - llm.block_manager.num_free_blocks
            assert used == len(kept.block_table)
            llm.step()  # the round's second step: the kept request's only
            assert len(kept.completion_token_ids) == 3
            while not llm.is_finished():
                llm.step()
        finally:
            llm.set_streaming(False)
        assert kept.completion_token_ids == expected
        assert llm.block_manager.num_free_blocks == llm.block_manager.num_blocks
