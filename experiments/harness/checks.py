"""The config check that runs before Hydra creates a run's or a sweep's output dir: a config the engine
cannot serve on this machine (`device=cuda` without CUDA, `attention=flash_attn` without flash-attn, a bad
key value, a missing lengths file) stops the command at once, before any file or wandb run exists. A
sweep's every job is checked before the first one starts."""

from __future__ import annotations

import sys
from typing import Any

from hydra.core.global_hydra import GlobalHydra
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig

from experiments.harness.job import check_job_config
from experiments.harness.sweep_results import job_grid


def _stop(problem: str) -> None:
    """Hydra turns a callback's exception into a warning and carries on: this check has to stop it."""
    print(f"Error: {problem}", file=sys.stderr)
    raise SystemExit(1)


class ConfigCheck(Callback):
    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            check_job_config(config)
        except ValueError as error:
            _stop(str(error))

    def on_multirun_start(self, config: DictConfig, config_name: str | None = None, **kwargs: Any) -> None:
        grid = job_grid(config)
        if grid is None:  # another sweeper draws its jobs as it goes: each is checked when it starts
            return
        loader = GlobalHydra.instance().config_loader()
        for number, overrides in enumerate(grid):
            job_config = loader.load_configuration(config_name, overrides, run_mode=RunMode.RUN)
            try:
                check_job_config(job_config)
            except ValueError as error:
                _stop(f"job {number} ({' '.join(overrides)}): {error}")
