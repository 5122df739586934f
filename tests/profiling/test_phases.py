"""The run's phases from its step timeline, against sums made by hand."""

from nvllm.profiling.phases import format_phases, run_phases


def step(kind: str, start_s: float, end_s: float, num_seqs: int, num_tokens: int, device_ms: float) -> dict:
    return dict(
        kind=kind, start_s=start_s, end_s=end_s, num_seqs=num_seqs, num_tokens=num_tokens, device_ms=device_ms
    )


STEPS = [
    step("prefill", 0.0, 0.5, 4, 1000, 450.0),
    step("prefill", 0.5, 1.0, 4, 600, 400.0),
    step("decode", 1.0, 1.2, 8, 128, 190.0),  # the largest decode batch: 8
    step("decode", 1.2, 1.4, 6, 96, 195.0),  # 6 = 3/4 of 8: still full
    step("decode", 1.4, 1.5, 5, 80, 99.0),  # shrinking
    step("decode", 1.5, 1.6, 2, 32, 98.0),  # 2 = 1/4 of 8: still shrinking
    step("decode", 1.6, 2.0, 1, 16, 380.0),  # the tail
]


def test_steps_fall_into_phases_by_kind_and_batch_against_the_largest():
    phases = {phase.name: phase for phase in run_phases(STEPS)}
    assert list(phases) == ["prefill", "decode, full batch", "decode, shrinking", "decode, draining tail"]
    prefill, full, shrinking, tail = phases.values()
    assert (prefill.steps, prefill.tokens) == (2, 1600) and abs(prefill.wall_s - 1.0) < 1e-12
    assert abs(prefill.device_s - 0.85) < 1e-12
    assert (full.steps, full.tokens) == (2, 224) and abs(full.wall_s - 0.4) < 1e-12
    assert (shrinking.steps, shrinking.tokens) == (2, 112) and abs(shrinking.device_s - 0.197) < 1e-12
    assert (tail.steps, tail.tokens) == (1, 16) and abs(tail.wall_s - 0.4) < 1e-12


def test_table_gives_each_phases_share_and_rate():
    table = format_phases(STEPS)
    rows = {line.split("  ")[0].strip(): line.split() for line in table.splitlines()[2:]}
    assert rows["prefill"][-5:] == ["1.000", "50.0%", "1600", "1,600", "0.850"]
    assert rows["decode, draining tail"][-5:] == ["0.400", "20.0%", "16", "40", "0.380"]
    assert format_phases([]) == "No steps recorded."
    assert [p.name for p in run_phases(STEPS[:2])] == ["prefill"]  # no decode: no decode phases
