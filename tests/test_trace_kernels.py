"""The kernel summary of a torch trace: kernels summed by name, and the busy share of their span."""

import json

from experiments.trace_kernels import short_name, summary


def test_kernels_are_summed_by_name_and_the_gaps_count_as_idle(tmp_path):
    events = [
        {"cat": "kernel", "name": "gemm<float, 128>(float*, int)", "ts": 0, "dur": 30},
        {"cat": "kernel", "name": "gemm<float, 64>(float*, int)", "ts": 40, "dur": 30},
        {"cat": "kernel", "name": "rmsnorm_kernel", "ts": 80, "dur": 20},
        {"cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 500},  # host events are not kernels
    ]
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    text = summary(trace, top=5)
    lines = text.splitlines()
    assert lines[0].startswith("3 kernels, 0.08 ms on the device over a span of 0.10 ms (80% busy)")
    assert lines[2].split() == ["2", "0.06", "30.0", "75.0%", "gemm<…>"]
    assert lines[3].split() == ["1", "0.02", "20.0", "25.0%", "rmsnorm_kernel"]


def test_a_trace_without_kernels_says_so(tmp_path):
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"traceEvents": [{"cat": "cpu_op", "name": "x", "ts": 0, "dur": 1}]}))
    assert "no GPU kernels" in summary(trace, top=5)
    assert short_name("void f<int>(int*)") == "void f<…>"
