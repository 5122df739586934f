"""The kernel summary of a torch trace: kernels summed by name, the idle time before their launches, the
span each adds, and the busy share of their span."""

import json

from experiments.studies.trace_kernels import short_name, summary


def test_kernels_are_summed_by_name_and_the_gaps_count_as_idle(tmp_path):
    events = [  # out of order, as a trace may list them
        {"cat": "kernel", "name": "rmsnorm_kernel", "ts": 84, "dur": 16},
        {"cat": "kernel", "name": "gemm<float, 128>(float*, int)", "ts": 0, "dur": 30},
        {"cat": "kernel", "name": "gemm<float, 64>(float*, int)", "ts": 40, "dur": 30},
        {"cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 500},  # host events are not kernels
    ]
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    text = summary(trace, top=5)
    lines = text.splitlines()
    assert lines[0].startswith("3 kernels, 0.08 ms on the device over a span of 0.10 ms (76% busy)")
    # the gemms waited 0 and 10 us before they started, the norm 14; none overlaps, so each adds its time
    assert lines[2].split() == ["2", "0.06", "30.0", "5.0", "30.0", "78.9%", "60.0%", "gemm<…>"]
    assert lines[3].split() == ["1", "0.02", "16.0", "14.0", "16.0", "21.1%", "16.0%", "rmsnorm_kernel"]


def test_a_gap_is_measured_from_the_latest_end_of_the_kernels_before():
    from experiments.studies.trace_kernels import idle_before

    kernels = [{"ts": 0, "dur": 50}, {"ts": 10, "dur": 5}, {"ts": 60, "dur": 1}]  # two streams overlap
    assert idle_before(kernels) == [0.0, 0.0, 10.0]


def test_a_kernel_launched_early_adds_only_the_span_past_the_kernels_before_it():
    """Under programmatic dependent launch a kernel starts inside the one before and waits: its device time
    counts the wait, the span it adds does not, and the added spans with the gaps make the whole span."""
    from experiments.studies.trace_kernels import idle_before, span_added

    kernels = [{"ts": 0, "dur": 10}, {"ts": 2, "dur": 20}, {"ts": 20, "dur": 5}, {"ts": 30, "dur": 2}]
    assert span_added(kernels) == [10.0, 12.0, 3.0, 2.0]
    assert sum(span_added(kernels)) + sum(idle_before(kernels)) == 32


def test_kernels_are_ranked_by_the_span_they_add(tmp_path):
    events = [
        {"cat": "kernel", "name": "waits_long", "ts": 5, "dur": 45},  # started early, waited for "first"
        {"cat": "kernel", "name": "first", "ts": 0, "dur": 45},
        {"cat": "kernel", "name": "waits_long", "ts": 60, "dur": 45},
        {"cat": "kernel", "name": "first", "ts": 55, "dur": 45},
    ]
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    lines = summary(trace, top=5).splitlines()
    assert lines[2].split()[-1] == "first" and lines[2].split()[4] == "45.0"
    assert lines[3].split()[-1] == "waits_long" and lines[3].split()[4] == "5.0"


def test_a_trace_without_kernels_says_so(tmp_path):
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"traceEvents": [{"cat": "cpu_op", "name": "x", "ts": 0, "dur": 1}]}))
    assert "no GPU kernels" in summary(trace, top=5)
    assert short_name("void f<int>(int*)") == "void f<…>"
