"""Sweeps through Hydra's cluster launchers, as a user runs them: a 2-job sweep through nvllm's Ray launcher
(`hydra/launcher=ray`, on a local Ray of 2 CPUs) and one through submitit's local launcher, each job with
its results.json and the sweep with its summary (the two sweeps run side by side); and the GPUs the Ray
launcher reserves for a job."""

import csv
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from nvllm.run import compose_config
from tests.helpers.experiment_utils import SMALL_WORKLOAD, TINY

LAUNCHERS = {
    "ray": [
        "hydra/launcher=ray",
        "+hydra.launcher.ray.init.num_cpus=2",
        "+hydra.launcher.ray.init.include_dashboard=false",
    ],
    "submitit_local": ["hydra/launcher=submitit_local"],
}


@dataclass
class Sweep:
    directory: Path
    process: subprocess.Popen
    output: Path  # the command's stdout and stderr, in files: a full pipe would stall a sweep not yet read

    def finish(self) -> tuple[str, str]:
        """The sweep's stdout and stderr, once it has ended."""
        self.process.wait(timeout=600)
        return (self.output / "stdout").read_text(), (self.output / "stderr").read_text()


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory) -> Iterator[dict[str, Sweep]]:
    """One sweep per installed launcher, all started at once: each spends most of its time starting
    interpreters, Ray's daemons or submitit's job processes, which overlap on the machine's cores."""
    env = {**os.environ, "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1"}
    started = {}
    for launcher, overrides in LAUNCHERS.items():
        if importlib.util.find_spec("ray" if launcher == "ray" else "submitit") is None:
            continue
        output = tmp_path_factory.mktemp(launcher)
        command = [sys.executable, "-m", "nvllm", "run", "-m", "+experiment=bench", *overrides, *TINY]
        command += [*SMALL_WORKLOAD, "scheduler.num_decode_steps=1,4", f"hydra.sweep.dir={output / 'sweep'}"]
        with open(output / "stdout", "w") as stdout, open(output / "stderr", "w") as stderr:
            process = subprocess.Popen(command, env=env, stdout=stdout, stderr=stderr, text=True)
        started[launcher] = Sweep(output / "sweep", process, output)
    yield started
    for sweep in started.values():  # a sweep whose test failed before reading it
        if sweep.process.poll() is None:
            sweep.process.kill()
            sweep.process.wait()


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_sweep_through_a_cluster_launcher(launcher, sweeps):
    pytest.importorskip("ray" if launcher == "ray" else "submitit")
    sweep = sweeps[launcher]
    stdout, stderr = sweep.finish()
    assert sweep.process.returncode == 0, stderr[-3000:]
    sweep_dir = sweep.directory
    with open(sweep_dir / "summary.csv", newline="") as file:
        rows = list(csv.DictReader(file))
    assert [(row["job"], row["status"], row["scheduler.num_decode_steps"]) for row in rows] == [
        ("0", "done", "1"),
        ("1", "done", "4"),
    ]
    for row in rows:
        results = json.loads((sweep_dir / row["job"] / "results.json").read_text())
        assert float(row["output_tok_per_s"]) == pytest.approx(results["metrics"]["output_tok_per_s"])
        assert results["provenance"]["device"] == "cpu" and results["config"]["model"]["name"] == "tiny"
    assert "Sweep summary of 2/2 jobs" in stdout


@pytest.mark.parametrize(
    "overrides, cluster_gpus, gpus",
    [
        (["device=cpu", "parallel=tp2"], 8, 0),
        (["device=cuda", "parallel=tp2"], 8, 2),
        (["parallel=tp4"], 8, 4),  # device=auto on a cluster with GPUs
        (["parallel=tp4"], 0, 0),  # device=auto on a cluster of CPUs
    ],
)
def test_the_ray_launcher_reserves_a_job_its_tensor_parallel_gpus(overrides, cluster_gpus, gpus):
    pytest.importorskip("ray")
    from hydra_plugins.nvllm_ray_launcher.gpu_sized_launcher import job_gpus

    assert job_gpus(compose_config(overrides), cluster_gpus) == gpus
