"""`+experiment=profile` end to end on a tiny model: the summary, the timelines, the figures and a torch
trace in the run dir, MFU/MBU in the results, and the figures and the step timeline in the wandb run."""

import json

from experiments.runners import bench, latency
from nvllm.run import compose_config
from nvllm.visualize import FIGURE_NAMES
from tests.helpers.experiment_utils import SMALL_WORKLOAD, TINY, run_file_holding

RUN_FILES = ("steps.csv", "requests.csv", "profile.json", "profile.txt", "trace.json", "results.json")


def test_profile_experiment_writes_and_logs_everything(tmp_path, capsys):
    overrides = ["+experiment=profile", *TINY, *SMALL_WORKLOAD, "profile.torch_trace_start_step=1"]
    cfg = compose_config([*overrides, "profile.torch_trace_steps=1"])
    assert cfg.profile.enabled and cfg.runner._target_ == "experiments.runners.bench.run"
    metrics = bench.run(cfg, tmp_path, name="test-profile")
    assert all((tmp_path / name).is_file() for name in RUN_FILES)
    assert all((tmp_path / "figures" / name).read_bytes().startswith(b"\x89PNG") for name in FIGURE_NAMES)
    steps = (tmp_path / "steps.csv").read_text().splitlines()
    requests = (tmp_path / "requests.csv").read_text().splitlines()
    assert len(requests) == 1 + 3 and len(steps) > 2  # a header and the workload's three requests
    assert any(
        event.get("name") == "nvllm.step"
        for event in json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    )
    assert {"prefill_mfu", "decode_mbu"} <= set(metrics) and metrics["decode_mfu"] is None  # a CPU
    assert "host: schedule" in capsys.readouterr().out  # the summary, printed
    expected = [f"figures/{name.removesuffix('.png')}".encode() for name in FIGURE_NAMES]
    expected += [b"image-file", b"timeline/kv_blocks_used", b"timeline/num_tokens"]
    data = run_file_holding(tmp_path, *expected)
    assert all(item in data for item in expected)


def test_latency_with_profiling_writes_the_timelines(tmp_path):
    cfg = compose_config(
        [
            "+experiment=latency",
            *TINY,
            "wandb.mode=disabled",
            "workload.input_len=16",
            "workload.output_len=8",
            "profile.enabled=true",
        ]
    )
    metrics = latency.run(cfg, tmp_path)
    steps = (tmp_path / "steps.csv").read_text().splitlines()
    assert metrics["output_tokens"] == 8 and len(steps) >= 2 and (tmp_path / "figures").is_dir()
    assert not (tmp_path / "trace.json").exists()  # none asked for


def test_bench_without_profiling_writes_no_profile(tmp_path):
    cfg = compose_config(["+experiment=bench", *TINY, *SMALL_WORKLOAD, "wandb.mode=disabled"])
    bench.run(cfg, tmp_path)
    assert (tmp_path / "results.json").is_file() and not (tmp_path / "steps.csv").exists()
