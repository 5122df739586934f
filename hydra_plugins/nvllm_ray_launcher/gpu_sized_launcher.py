"""Hydra's Ray launcher with each job's resources its own: a job runs as a Ray task that reserves
`num_gpus` = its tensor-parallel size (none for a CPU job), read from the job's composed config, so that a
sweep over `parallel` packs onto the cluster's GPUs as its jobs need them. The published hydra-ray-launcher
gives every job the same `hydra.launcher.ray.remote` options; its job runner runs each job here.

Registered as `hydra/launcher=ray` in place of the published launcher's config of that name: a local Ray
instance unless `hydra.launcher.ray.init.address=auto` (or ray://HOST:10001) joins a cluster. Nothing of
Ray is imported until a sweep launches: without the `ray` extra, Hydra's plugin scan stays quiet."""

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, filter_overrides, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict

try:  # the published launcher registers its `ray` config on import: first, so that ours replaces it
    import hydra_plugins.hydra_ray_launcher._config  # noqa: F401
except ImportError:  # without the `ray` extra this launcher is listed, and refuses to launch
    pass

log = logging.getLogger(__name__)
MISSING_EXTRA = 'hydra/launcher=ray needs Ray and hydra-ray-launcher: pip install -e ".[ray]"'


@dataclass
class RaySettings:
    init: dict[str, Any] = field(default_factory=lambda: {"address": None})  # ray.init's arguments
    remote: dict[str, Any] = field(default_factory=dict)  # every job's further task options; not num_gpus


@dataclass
class GpuSizedRayLauncherConf:
    _target_: str = "hydra_plugins.nvllm_ray_launcher.gpu_sized_launcher.GpuSizedRayLauncher"
    ray: RaySettings = field(default_factory=RaySettings)


# Hydra loads a plugin's module outside sys.modules: no `from __future__ import annotations` here, which
# would leave the dataclasses' annotations to be looked up there
ConfigStore.instance().store(
    group="hydra/launcher", name="ray", node=GpuSizedRayLauncherConf, provider="nvllm"
)


def job_gpus(job_config: DictConfig, cluster_gpus: float) -> int:
    """A job's GPUs: its tensor-parallel size, unless it runs on the CPU (`device=cpu`, or `auto` on a
    cluster without GPUs)."""
    device = job_config.device
    if device == "cpu" or device == "auto" and cluster_gpus == 0:
        return 0
    return job_config.parallel.tensor_parallel_size


class GpuSizedRayLauncher(Launcher):
    def __init__(self, ray: DictConfig) -> None:
        self.ray_cfg = ray
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self.task_function: TaskFunction | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.task_function = task_function

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        try:
            import ray
            from hydra_plugins.hydra_ray_launcher._launcher_util import launch_job_on_ray, start_ray
        except ImportError:
            raise ValueError(MISSING_EXTRA) from None
        setup_globals()
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        start_ray(self.ray_cfg.init)
        cluster_gpus = ray.cluster_resources().get("GPU", 0)
        log.info(f"Ray launcher: {len(job_overrides)} jobs on {ray.cluster_resources()}, into {sweep_dir}")
        pending = []
        for number, overrides in enumerate(job_overrides, start=initial_job_idx):
            job_config = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
            remote = {**OmegaConf.to_container(self.ray_cfg.remote, resolve=True)}
            remote["num_gpus"] = job_gpus(job_config, cluster_gpus)
            log.info(f"\t#{number} ({remote['num_gpus']} GPUs): {' '.join(filter_overrides(overrides))}")
            with open_dict(job_config):
                job_config.hydra.job.id = f"ray_job_{number}"  # no scheduler names the job here
                job_config.hydra.job.num = number
            remote_config = OmegaConf.create(remote)
            state = Singleton.get_state()
            pending.append(
                launch_job_on_ray(self.hydra_context, remote_config, job_config, self.task_function, state)
            )
        return [ray.get(job) for job in pending]
