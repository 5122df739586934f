"""The experiment harness's config: what `python -m nvllm.run` composes beyond the engine's groups (the
workload, wandb, the runner), its registration in Hydra's ConfigStore, and the engine config it yields.

The engine's groups are the library's own frozen dataclasses (`nvllm.config`); Hydra gets writable copies of
them (OmegaConf makes a frozen dataclass node read-only, and no override could then be applied), so each
group's keys, types and defaults still have one owner.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field, fields
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from experiments.harness.batch_config import BatchConfig
from nvllm.config import EngineConfig, to_dataclass
from nvllm.engine.config_resolution import engine_config_from_dict
from nvllm.models.presets import PRESETS


@dataclass
class WorkloadConfig:
    """The requests an experiment sends. Lengths are typed ints (so Hydra rejects a wrong type): a
    length is drawn uniformly from [min_*, *] when min_* is set, else it is exactly *."""

    num_seqs: int = 8
    input_len: int = 128  # random-token prompts only: text prompts have the length they have
    min_input_len: int | None = None
    output_len: int = 64
    min_output_len: int | None = None
    temperature: float = 0.6
    ignore_eos: bool = True
    seed: int = 0  # draws the prompt tokens and the lengths; repeat i draws with seed + i
    prompts: list[str] = field(default_factory=list)  # text, cycled to num_seqs; empty: random tokens
    # A JSONL or CSV file of `input_len`, `output_len` rows: each repeat draws num_seqs of them (with
    # replacement) for random-token prompts, in place of the *_len keys. Relative paths: from the working
    # directory, else from conf/workload/ (where the example lives).
    lengths_file: str | None = None
    # A ShareGPT-format JSON file of conversations (experiments/harness/sharegpt.py): each repeat draws
    # num_seqs different ones, prompts and output lengths from their first exchange, in place of the *_len
    # keys. A relative path is from the working directory.
    sharegpt_file: str | None = None
    # How often the measured part runs, each time on fresh requests, after one warm-up. None: 3 on a GPU,
    # 1 on the CPU (where a run of a full-size model takes minutes).
    repeats: int | None = None
    # Shared prefixes (experiments/runners/shared_prefix_workload.py): with num_prefixes > 0, the num_seqs
    # random
    # prompts are num_prefixes random prefixes of prefix_len tokens, num_seqs / num_prefixes requests under
    # each, every one followed by its own suffix of input_len tokens (min_input_len to input_len).
    num_prefixes: int = 0
    prefix_len: int = 0
    interleave_prefixes: bool = False  # requests ordered prefix by prefix (False) or round robin (True)
    # The workload on the CPU, key by key, where the command line does not set the key: the speed
    # experiments' workloads are GPU-sized (hours on a CPU). None: the same workload on every device.
    on_cpu: dict[str, Any] | None = None


@dataclass
class WandbConfig:
    project: str = "nvllm"
    mode: str = "offline"  # online | offline | disabled; conf/wandb/default.yaml reads $WANDB_MODE
    group: str | None = None  # the sweep experiment groups its jobs by sweep dir
    dir: str | None = None  # None: the job's Hydra output dir
    quiet: bool = True  # wandb prints nothing; nvllm prints one line with the run's dir and sync command


@dataclass
class SummaryConfig:
    """The sweep summary's table and plot: one metric, by the swept keys `x` and `hue` (None: the first and
    second swept key)."""

    metric: str = "output_tok_per_s"
    x: str | None = None
    hue: str | None = None
    y_from_zero: bool = True  # the plot's y-axis starts at 0, so that a difference looks its size


@dataclass
class ValidateConfig:
    """`+experiment=validate`: the prompts whose greedy generations are compared with transformers'."""

    prompts: str | None = None  # a text file, one prompt a line; None: a few built-in prompts
    max_tokens: int = 32  # tokens generated per prompt


@dataclass
class RunnerConfig:
    """The experiment runner that `python -m nvllm.run` calls: `run(cfg, output_dir, name) -> metrics`."""

    _target_: str = "experiments.runners.generate.run"


def conf_dir() -> Path:
    """Hydra's `conf/`: inside an installed wheel (as `experiments/conf`), else at the top of the checkout.
    The wheel's copy is looked for first: an installed package's parent is site-packages, where a `conf`
    directory may belong to anything."""
    installed = Path(str(resources.files("experiments") / "conf"))
    return installed if installed.is_dir() else Path(__file__).resolve().parents[2] / "conf"


ENGINE_KEYS = tuple(f.name for f in fields(EngineConfig))


def validate_workload(workload: WorkloadConfig) -> None:
    """What the schema's types cannot say about a workload, as one clear ValueError."""
    problems = []
    if workload.num_seqs < 1:
        problems.append(f"workload.num_seqs={workload.num_seqs} must be positive")
    for kind in ("input", "output"):
        longest, shortest = getattr(workload, f"{kind}_len"), getattr(workload, f"min_{kind}_len")
        if longest < 1:
            problems.append(f"workload.{kind}_len={longest} must be positive")
        if shortest is not None and not 1 <= shortest <= longest:
            problems.append(f"workload.min_{kind}_len={shortest} must be in [1, {kind}_len={longest}]")
    if workload.repeats is not None and workload.repeats < 1:
        problems.append(f"workload.repeats={workload.repeats} must be positive (or null: by device)")
    if workload.lengths_file is not None and workload.prompts:
        problems.append(
            "workload.lengths_file and workload.prompts exclude each other: text prompts have "
            "the lengths they have"
        )
    if workload.sharegpt_file is not None and (
        workload.prompts or workload.lengths_file is not None or workload.num_prefixes
    ):
        problems.append(
            "workload.sharegpt_file gives the prompts and lengths: it excludes workload.prompts, "
            "workload.lengths_file and workload.num_prefixes"
        )
    if workload.num_prefixes and workload.lengths_file is not None:
        problems.append("workload.num_prefixes and workload.lengths_file exclude each other")
    if workload.num_prefixes < 0 or workload.num_prefixes and workload.num_seqs % workload.num_prefixes:
        problems.append(
            f"workload.num_prefixes={workload.num_prefixes} must be 0 (no shared prefix) or divide "
            f"workload.num_seqs={workload.num_seqs}"
        )
    if workload.num_prefixes and (workload.prefix_len < 1 or workload.prompts):
        problems.append(
            "shared prefixes (workload.num_prefixes) need workload.prefix_len >= 1 and no prompts"
        )
    if workload.temperature < 0:
        problems.append(f"workload.temperature={workload.temperature} must be >= 0 (0 means greedy)")
    if problems:
        raise ValueError("invalid workload: " + "; ".join(problems))


DEFAULT_GPU_REPEATS = 3


def resolved_repeats(workload: WorkloadConfig, device: str) -> int:
    """`workload.repeats`, or by device: a GPU runs the bench workload in seconds, a CPU in minutes."""
    if workload.repeats is not None:
        return workload.repeats
    return DEFAULT_GPU_REPEATS if device.startswith("cuda") else 1


def command_line_keys(cfg: DictConfig) -> set[str]:
    """The keys the command line set: from the config's `hydra` node (what callbacks get), else from the
    running job's Hydra config; none outside Hydra (`nvllm.run.compose_config` drops the keys its
    overrides set from `workload.on_cpu` instead)."""
    from hydra.core.hydra_config import HydraConfig

    if "hydra" in cfg:
        return override_keys(cfg.hydra.overrides.task)
    return override_keys(HydraConfig.get().overrides.task) if HydraConfig.initialized() else set()


def override_keys(overrides: list[str]) -> set[str]:
    return {override.split("=", 1)[0].lstrip("+~") for override in overrides}


def checkpoint_overrides(overrides: list[str]) -> list[str]:
    """`model=org/name` or `model=DIR` as `model.path=...`: Hydra's `model` group holds the presets alone
    (a value with a slash is a config file path to it), while a checkpoint, local or on the hub, is
    `model.path` (its architecture over the default preset's)."""
    return [
        f"model.path={value}" if key == "model" and "/" in value and value not in PRESETS else override
        for override in overrides
        for key, _, value in [override.partition("=")]
    ]


def on_cpu_left(on_cpu: dict[str, Any], set_keys: set[str]) -> dict[str, Any]:
    """The keys of `workload.on_cpu` that the command line (`set_keys`, dotted) left alone: those it set
    stay as it set them, on the CPU too."""
    return {key: value for key, value in on_cpu.items() if f"workload.{key}" not in set_keys}


def workload_config(cfg: DictConfig, device: str | None = None) -> WorkloadConfig:
    """The workload, on the CPU (`device`) with `workload.on_cpu`'s keys in place of those the command
    line leaves alone."""
    values = OmegaConf.to_container(cfg.workload, resolve=True)
    if device == "cpu" and values["on_cpu"]:
        values |= on_cpu_left(values["on_cpu"], command_line_keys(cfg))
    on_cpu = values.pop("on_cpu")  # a dict of keys, which to_dataclass takes for a group: checked as merged
    workload = dataclasses.replace(to_dataclass(WorkloadConfig, values), on_cpu=on_cpu)
    validate_workload(workload)
    return workload


def cpu_sized_note(cfg: DictConfig, workload: WorkloadConfig) -> str | None:
    """One line saying the workload was made CPU-sized, and how to run the full one; None if it was not."""
    given = OmegaConf.to_container(cfg.workload, resolve=True)
    changed = {key: value for key, value in dataclasses.asdict(workload).items() if given[key] != value}
    if unknown := set(workload.on_cpu or {}) - set(given):
        raise ValueError(f"workload.on_cpu names keys the workload does not have: {sorted(unknown)}")
    if not changed:
        return None
    values = " ".join(f"{key}={value}" for key, value in changed.items())
    return f"On the CPU: a CPU-sized workload ({values}); workload.on_cpu=null runs the full one"


def engine_config_from_run_config(cfg: DictConfig | dict) -> EngineConfig:
    """The engine's part of a composed config, validated and resolved. Only the engine's keys are resolved:
    the others may name Hydra's runtime (`${hydra:...}`), which exists only inside a job."""
    if isinstance(cfg, dict):
        values = {key: cfg[key] for key in ENGINE_KEYS if key in cfg}
    else:
        values = {
            key: OmegaConf.to_container(cfg[key], resolve=True) if OmegaConf.is_config(cfg[key]) else cfg[key]
            for key in ENGINE_KEYS
            if key in cfg
        }
    return engine_config_from_dict(values)


@dataclass
class ServingSLOConfig:
    """The serving experiment's service-level objectives: goodput counts requests within both."""

    ttft_ms: float = 500.0
    tpot_ms: float = 50.0


@dataclass
class ServingConfig:
    """`+experiment=serving`: the server's URL (None: started in the job), the request rates (req/s, inf:
    all at once), the arrivals' burstiness (gamma shape; 1: Poisson), and whether the job's engine is also
    measured offline beside the server (`offline_reference`); `engine_process`: the started server's engine
    is built and stepped in a process of its own (`nvllm serve --engine-process`); `load_processes`: the
    load's client processes, each sending its share of the requests on the same arrival schedule (one
    client process parsing every streamed chunk of a loaded server is slower than the server)."""

    url: str | None = None
    request_rates: list[float] = field(default_factory=lambda: [1.0, 4.0, 16.0, float("inf")])
    burstiness: float = 1.0
    offline_reference: bool = True
    engine_process: bool = True
    load_processes: int = 4
    slo: ServingSLOConfig = field(default_factory=ServingSLOConfig)


@cache
def writable(cls: type) -> type:
    """A plain (unfrozen) dataclass with `cls`'s fields, types and defaults, for Hydra's schemas. It is kept
    in this module as `Writable<cls>`: a composed config refers to its schemas' classes, and a launcher that
    pickles a job's config (joblib, submitit) finds them there again by name."""
    hints = typing.get_type_hints(cls)
    specs = []
    for spec in fields(cls):
        if dataclasses.is_dataclass(hints[spec.name]):
            nested = writable(hints[spec.name])
            specs.append((spec.name, nested, field(default_factory=nested)))
        elif spec.default_factory is not dataclasses.MISSING:
            specs.append((spec.name, hints[spec.name], field(default_factory=spec.default_factory)))
        else:
            specs.append((spec.name, hints[spec.name], field(default=spec.default)))
    schema = dataclasses.make_dataclass(f"Writable{cls.__name__}", specs)
    schema.__module__ = __name__
    globals()[schema.__name__] = schema
    return schema


# The whole composed config: the engine's groups (writable copies) plus the workload, wandb and the runner.
RunConfig = dataclasses.make_dataclass(
    "RunConfig",
    [
        ("workload", WorkloadConfig, field(default_factory=WorkloadConfig)),
        ("wandb", WandbConfig, field(default_factory=WandbConfig)),
        ("summary", SummaryConfig, field(default_factory=SummaryConfig)),
        ("validate", ValidateConfig, field(default_factory=ValidateConfig)),
        ("runner", RunnerConfig, field(default_factory=RunnerConfig)),
        ("serving", ServingConfig, field(default_factory=ServingConfig)),
        ("batch", BatchConfig, field(default_factory=BatchConfig)),  # the batch experiment's
        # torch's intra-op threads on the CPU. None: $OMP_NUM_THREADS when set, else the available cores
        ("cpu_threads", int | None, field(default=None)),
    ],
    bases=(writable(EngineConfig),),
)
RunConfig.__module__ = __name__


RUNNER_SETTINGS = ("runner", "summary", "serving", "validate", "batch")


def register_configs() -> None:
    """Put the schemas in Hydra's ConfigStore: `run_schema` types the whole composed config (a wrong key
    or type fails at composition, naming it), `<group>/schema` is what each group's YAML extends, and every
    model preset is an option of the `model` group. Called by the harness's entry points (`nvllm.run`),
    never on import."""
    from hydra.core.config_store import ConfigStore

    from experiments.harness.plugins import expose_hydra_plugins

    expose_hydra_plugins()  # before Hydra lists its plugins: nvllm's Ray launcher from any install
    store = ConfigStore.instance()
    store.store(name="run_schema", node=RunConfig)
    for group, schema in typing.get_type_hints(RunConfig).items():
        # the runner, the summary and each runner's own settings are no groups of options: each experiment
        # names its runner
        if dataclasses.is_dataclass(schema) and group not in RUNNER_SETTINGS:
            store.store(group=group, name="schema", node=schema)
    for name, preset in PRESETS.items():
        store.store(group="model", name=name, node=writable(type(preset))(**dataclasses.asdict(preset)))
    from experiments.harness.help import help_config  # lists the presets stored above

    store.store(group="hydra/help", name="nvllm", node=help_config(conf_dir()))
