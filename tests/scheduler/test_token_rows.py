"""TokenRows: one row of the device's token table per running sequence, a prompt's forks included; rows go
back when a sequence is preempted or finishes."""

from nvllm import SamplingParams
from nvllm.scheduler.sequence import Sequence
from nvllm.scheduler.token_rows import TokenRows
from tests.helpers.scheduler_utils import EOS, bare_scheduler, run_step


def test_a_sequence_and_its_forks_take_distinct_rows_and_give_them_back():
    rows = TokenRows(num_rows=3)
    forks = [Sequence([1, 2], SamplingParams()) for _ in range(2)]
    seq = Sequence([1, 2], SamplingParams(), forks=forks)
    assert rows.fit(seq) and not TokenRows(num_rows=2).fit(seq)  # three rows for three samples
    rows.assign(seq)
    assert sorted(member.token_row for member in (seq, *forks)) == [0, 1, 2] and rows.free_rows == []
    for member in (seq, *forks):
        rows.release(member)
    assert sorted(rows.free_rows) == [0, 1, 2] and seq.token_row is None


def test_rows_return_on_preemption_and_on_finish():
    scheduler = bare_scheduler(num_blocks=3, max_num_seqs=3, num_decode_steps=1)
    free_rows = scheduler.lifecycle.token_rows.free_rows
    # prompts of one block each, different: no prefix-cache hit lets `new` back in while `old` runs
    old, new = (Sequence(prompt, SamplingParams(max_tokens=10)) for prompt in ([1, 2, 3, 4], [5, 6, 8, 9]))
    for seq in (old, new):
        scheduler.add(seq)
    run_step(scheduler)  # both admitted: one block each
    assert len(free_rows) == 1 and {old.token_row, new.token_row, *free_rows} == {0, 1, 2}
    run_step(scheduler)  # each needs a second block, one is free: the newest is preempted
    assert scheduler.num_preemptions == 1 and new.token_row is None and len(free_rows) == 2
    run_step(scheduler, token_id=EOS)  # `old` stops
    assert old.is_finished and old.token_row is None and len(free_rows) == 3
