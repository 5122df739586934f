"""The visualizer: the four figures from a profiled run's files (PNGs of the expected size), a lifecycle
figure that gives each of 256 requests its row, the lifecycle of a preempted request, and the command."""

import json
import random
import struct
import subprocess
import sys

import pytest

from nvllm.profiling.timeline import (
    REQUEST_FIELDS,
    REQUESTS_FILE,
    STEPS_FILE,
    new_request,
    read_run_dir,
    write_rows,
)
from nvllm.visualize import FIGURE_NAMES, lifecycle_segments, main, render
from tests.helpers.profiled_run import write_profiled_run

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC)
    return struct.unpack(">II", data[16:24])  # the IHDR chunk: width, height


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("profiled-run")
    return directory, write_profiled_run(directory)


def test_run_files_read_back_as_recorded(run_dir):
    directory, (steps, requests, profile) = run_dir
    read_steps, read_requests, read_profile = read_run_dir(directory)
    assert (
        read_steps == steps and read_requests == requests and read_profile == json.loads(json.dumps(profile))
    )
    assert (directory / "profile.txt").read_text().startswith("Profile of")


def test_renders_the_four_figures(run_dir):
    directory, _ = run_dir
    paths = render(directory)
    assert [path.name for path in paths] == list(FIGURE_NAMES)
    assert all(path.parent == directory / "figures" for path in paths)
    # 12 x 7 in, 12 x 7 in, 12 x 4 in (a few requests), 12 x 6 in at 100 dpi
    assert [png_size(path) for path in paths] == [(1200, 700), (1200, 700), (1200, 400), (1200, 600)]


def test_lifecycles_of_256_requests_get_a_row_each(tmp_path, run_dir):
    directory, (steps, _, profile) = run_dir
    rng = random.Random(0)
    requests = []
    for index in range(256):
        arrival = rng.uniform(0, 1)
        request = new_request(index, 100, arrival)
        request.update(first_scheduled_s=arrival + 0.5, first_token_s=arrival + 0.6, finish_s=arrival + 3)
        request.update(prefill_done_s=[arrival + 0.6], output_len=50)
        requests.append(request)
    (tmp_path / "profile.json").write_text(json.dumps(profile))
    (tmp_path / STEPS_FILE).write_text((directory / STEPS_FILE).read_text())
    write_rows(tmp_path / REQUESTS_FILE, requests, REQUEST_FIELDS)
    paths = render(tmp_path)
    # 1.5 in + 0.04 in per request: 11.74 in at 100 dpi, about 4 pixels a row
    assert png_size(paths[2]) == (1200, 1174)


def test_a_preempted_request_waits_then_computes_its_prompt_again():
    request = new_request(7, 40, arrival_s=0.0)
    request.update(first_scheduled_s=1.0, first_token_s=2.0, finish_s=8.0)
    request.update(preempted_s=[4.0], resumed_s=[5.0], prefill_done_s=[2.0, 6.0], num_preemptions=1)
    assert lifecycle_segments(request, end_of_run=9.0) == [
        ("waiting", 0.0, 1.0),
        ("prefill", 1.0, 2.0),
        ("decode", 2.0, 4.0),
        ("waiting", 4.0, 5.0),
        ("prefill", 5.0, 6.0),
        ("decode", 6.0, 8.0),
    ]
    never_admitted = new_request(8, 40, arrival_s=3.0)
    assert lifecycle_segments(never_admitted, end_of_run=9.0) == [("waiting", 3.0, 9.0)]


def test_command_renders_and_refuses_a_dir_without_timelines(tmp_path, run_dir, capsys):
    directory, _ = run_dir
    main([str(directory)])
    assert capsys.readouterr().out.split() == [str(directory / "figures" / name) for name in FIGURE_NAMES]
    done = subprocess.run(
        [sys.executable, "-m", "nvllm.visualize", str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2 and "steps.csv" in done.stderr and "profile.enabled=true" in done.stderr
