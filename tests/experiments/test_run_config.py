"""The composed `python -m nvllm.run` config: every experiment composes, and a wrong key or value is
rejected with a message that names it."""

import pickle

import pytest
from hydra.core.hydra_config import HydraConfig
from hydra.errors import ConfigCompositionException
from hydra.types import RunMode
from hydra.utils import get_method
from omegaconf import DictConfig, open_dict

from experiments.harness.config import engine_config_from_run_config, workload_config
from nvllm.run import CONF_DIR, compose_config

EXPERIMENTS = sorted(path.stem for path in (CONF_DIR / "experiment").glob("*.yaml"))


@pytest.fixture
def job_config():
    """Compose as a Hydra job sees its config: the `hydra` node moved into HydraConfig (which resolves
    `${hydra:...}`, as the sweep's wandb group uses), reset afterwards."""

    def compose_job(overrides: list[str]) -> tuple[DictConfig, DictConfig]:
        cfg = compose_config(overrides, return_hydra_config=True)
        HydraConfig.instance().set_config(cfg)
        hydra_cfg = cfg.hydra
        with open_dict(cfg):
            del cfg["hydra"]
        return cfg, hydra_cfg

    yield compose_job
    HydraConfig.instance().cfg = None


def test_the_default_is_the_demo_on_qwen3_0_6b(monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    cfg = compose_config()
    assert cfg.runner._target_ == "experiments.runners.generate.run"
    engine = engine_config_from_run_config(cfg)
    assert (engine.model.name, engine.model.hidden_size, engine.model.path) == ("qwen3-0.6b", 1024, None)
    assert not engine.compile.enabled  # the demo starts in seconds; speed experiments compile
    assert cfg.wandb.mode == "offline"


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_experiment_composes(name, job_config):
    cfg, hydra_cfg = job_config([f"+experiment={name}"])
    get_method(cfg.runner._target_)
    engine = engine_config_from_run_config(cfg)
    assert engine.compile.enabled
    workload = workload_config(cfg)
    if name in ("bench", "sweep"):
        assert (workload.num_seqs, workload.min_input_len, workload.input_len) == (256, 100, 1024)
        assert (workload.min_output_len, workload.output_len, workload.temperature) == (100, 1024, 0.6)
        assert workload.ignore_eos and workload.seed == 0 and not workload.prompts
    if name == "latency":
        assert (workload.num_seqs, workload.input_len, workload.output_len) == (1, 128, 1024)
    if name == "sweep":
        assert hydra_cfg.mode == RunMode.MULTIRUN
        assert dict(hydra_cfg.sweeper.params) == {
            "cache.block_size": "256,512,1024",
            "scheduler.max_num_batched_tokens": "4096,8192,16384,32768",
        }
        get_method(hydra_cfg.callbacks.sweep_summary._target_)
        assert cfg.wandb.group == hydra_cfg.sweep.dir


def test_model_presets_and_overrides_compose():
    cfg = compose_config(["model=tiny", "cache.block_size=16", "scheduler.max_num_batched_tokens=512"])
    engine = engine_config_from_run_config(cfg)
    assert engine.model.hidden_size == 128 and engine.cache.block_size == 16
    assert engine.scheduler.max_num_batched_tokens == 512


@pytest.mark.parametrize("override", ["cache.blok_size=16", "blok_size=16"])
def test_an_unknown_key_is_rejected_by_name(override):
    with pytest.raises(ConfigCompositionException, match=override.split("=")[0]):
        compose_config([override])


def test_an_appended_unknown_key_is_rejected_by_name():
    cfg = compose_config(["+cache.blok_size=16"])  # `+` opens the node; the engine's schema still refuses it
    with pytest.raises(ValueError, match="blok_size"):
        engine_config_from_run_config(cfg)


WRONG_TYPES = ["cache.block_size=big", "workload.input_len=[1,9]", "compile.enabled=maybe"]


@pytest.mark.parametrize("override", WRONG_TYPES)
def test_a_value_of_the_wrong_type_is_rejected_by_name(override):
    key = override.split("=")[0]
    with pytest.raises(ConfigCompositionException, match=key) as error:
        compose_config([override])
    assert f"full_key: {key}" in str(error.value.__cause__)  # Hydra prints the cause under the message


@pytest.mark.parametrize(
    "override, key",
    [
        ("scheduler.num_decode_steps=0", "scheduler.num_decode_steps"),
        ("cache.block_size=0", "cache.block_size"),
        ("workload.min_input_len=2000", "workload.min_input_len"),
        ("workload.num_seqs=0", "workload.num_seqs"),
    ],
)
def test_an_invalid_value_is_rejected_by_name(override, key):
    cfg = compose_config([override])
    with pytest.raises(ValueError, match=key):
        engine_config_from_run_config(cfg)
        workload_config(cfg)


def test_wandb_mode_follows_the_environment(monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert compose_config().wandb.mode == "disabled"


def test_a_composed_config_survives_pickling():
    """Launchers that run jobs in other processes (joblib, submitit) pickle the config with its schemas."""
    cfg = compose_config(["+experiment=bench", "model=tiny", "cache.block_size=16"])
    copy = pickle.loads(pickle.dumps(cfg))
    assert copy == cfg and engine_config_from_run_config(copy) == engine_config_from_run_config(cfg)
