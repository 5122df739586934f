"""Hydra's Ray launcher (hydra-ray-launcher) with each job's resources its own: a job runs as a Ray task
that reserves `num_gpus` = its tensor-parallel size (none for a CPU job), read from the job's composed
config, so that a sweep over `parallel` packs onto the cluster's GPUs as its jobs need them. The published
launcher gives every job the same `hydra.launcher.ray.remote` options; those stay the base here.
Registered as `hydra/launcher=ray` in place of the published launcher's config of that name: a local Ray
instance unless `hydra.launcher.ray.init.address=auto` (or ray://HOST:10001) joins a cluster."""

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hydra.core.config_store import ConfigStore
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, filter_overrides, setup_globals
from hydra_plugins.hydra_ray_launcher._config import RayConf  # registers the published config first
from hydra_plugins.hydra_ray_launcher._launcher_util import launch_job_on_ray, start_ray
from hydra_plugins.hydra_ray_launcher.ray_launcher import RayLauncher
from omegaconf import DictConfig, OmegaConf, open_dict

log = logging.getLogger(__name__)


@dataclass
class GpuSizedRayLauncherConf:
    _target_: str = "hydra_plugins.nvllm_ray_launcher.gpu_sized_launcher.GpuSizedRayLauncher"
    # ray.init's arguments (address, num_cpus, include_dashboard...) and every job's further remote
    # options (num_cpus, memory, max_retries...); num_gpus is the job's own
    ray: RayConf = field(default_factory=RayConf)


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


class GpuSizedRayLauncher(RayLauncher):
    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        import ray

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
            pending.append(
                launch_job_on_ray(
                    self.hydra_context,
                    OmegaConf.create(remote),
                    job_config,
                    self.task_function,
                    Singleton.get_state(),
                )
            )
        return [ray.get(job) for job in pending]
