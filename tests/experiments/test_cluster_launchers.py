"""Sweeps through Hydra's cluster launchers, as a user runs them: a 2-job sweep through nvllm's Ray launcher
(`hydra/launcher=ray`, on a local Ray of 2 CPUs) and one through submitit's local launcher, each job with
its results.json and the sweep with its summary; and the GPUs the Ray launcher reserves for a job."""

import csv
import json
import os
import subprocess
import sys

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


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_sweep_through_a_cluster_launcher(launcher, tmp_path):
    pytest.importorskip("ray" if launcher == "ray" else "submitit")
    sweep_dir = tmp_path / "sweep"
    command = [sys.executable, "-m", "nvllm", "run", "-m", "+experiment=bench", *LAUNCHERS[launcher], *TINY]
    command += [*SMALL_WORKLOAD, "scheduler.num_decode_steps=1,4", f"hydra.sweep.dir={sweep_dir}"]
    env = {**os.environ, "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
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
    assert "Sweep summary of 2/2 jobs" in done.stdout


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
