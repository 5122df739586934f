"""`python -m nvllm.run [+experiment=NAME] [key=value ...]`: compose the config from conf/, call its runner.

The runner (`runner._target_`, see experiments/) gets the composed config, the job's Hydra output dir
and the job's overrides (the wandb run's name); it builds the engine from the config itself.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import hydra
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from hydra.utils import call
from omegaconf import DictConfig, OmegaConf

from experiments.harness.config import (
    checkpoint_overrides,
    conf_dir,
    on_cpu_left,
    override_keys,
    register_configs,
)
from experiments.harness.tracking import forget_results

CONF_DIR = conf_dir()


def compose_config(overrides: Sequence[str] = (), return_hydra_config: bool = False) -> DictConfig:
    """The config `python -m nvllm.run OVERRIDES` would run, composed without running (tests, notebooks)."""
    register_configs()
    overrides = checkpoint_overrides(list(overrides))
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=list(overrides), return_hydra_config=return_hydra_config)
    # as on the command line: a workload key the overrides set is not replaced on the CPU
    if on_cpu := cfg.workload.on_cpu:
        cfg.workload.on_cpu = on_cpu_left(OmegaConf.to_container(on_cpu), override_keys(overrides))
    return cfg


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
def run_job(cfg: DictConfig) -> dict:
    job = HydraConfig.get()
    output_dir = Path(job.runtime.output_dir)
    forget_results(output_dir)
    try:
        return call(cfg.runner, cfg, output_dir, job.job.override_dirname or None)
    except KeyboardInterrupt:  # one line, not the traceback of every frame the interrupt went through
        print(f"Interrupted (Ctrl-C) before a repeat finished: no results in {output_dir}", file=sys.stderr)
        raise SystemExit(130) from None


def main() -> None:
    register_configs()
    sys.argv[1:] = checkpoint_overrides(sys.argv[1:])
    run_job()


if __name__ == "__main__":
    main()
