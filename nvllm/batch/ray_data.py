"""nvllm in a Ray Data pipeline: `generate_dataset(dataset, config, sampling_params, replicas=N)` maps the
dataset's batches through N engine replicas (Ray actors, each holding one `LLM`) and returns the dataset
of completed rows. A replica reserves one GPU per tensor-parallel rank (one CPU on the CPU); one that dies
is restarted by Ray and the batches it held are run again, so every row comes out exactly once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nvllm.batch.files import file_format
from nvllm.batch.replica import Replica
from nvllm.config import EngineConfig
from nvllm.sampling_params import SamplingParams


def ray_installed() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def replica_resources(config: EngineConfig) -> dict[str, float]:
    """What one replica reserves: its tensor-parallel size in GPUs, or one CPU for a CPU engine."""
    if config.device.startswith("cuda"):
        return {"num_gpus": config.parallel.tensor_parallel_size}
    return {"num_cpus": 1}


def read_dataset(path: str | Path) -> Any:
    import ray.data

    path = Path(path)
    reader = ray.data.read_json if file_format(path) == "jsonl" else ray.data.read_parquet
    return reader(str(path))


def generate_dataset(
    dataset: Any,
    config: EngineConfig,
    sampling_params: SamplingParams,
    replicas: int = 1,
    batch_size: int = 64,
    chat_template_kwargs: dict | None = None,
    replica_class: type[Replica] = Replica,
) -> Any:
    """`dataset` (a `ray.data.Dataset`, or the path of a JSONL or Parquet file) with each row completed:
    its columns plus `text`, `token_ids`, `finish_reason` and `num_prompt_tokens`. `config` is the engine's
    (`nvllm.engine.config_resolution.engine_config(model, **overrides)` makes one as `LLM(...)` would);
    `batch_size` rows go through a replica's engine in one `generate`. Lazy, as Ray datasets are: rows are
    made as the result is consumed."""
    if replicas < 1:
        raise ValueError(f"replicas={replicas} must be at least 1")
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size} must be at least 1")
    import ray.data

    if isinstance(dataset, str | Path):
        dataset = read_dataset(dataset)
    return dataset.map_batches(
        replica_class,
        fn_constructor_kwargs={
            "config": config,
            "sampling_params": sampling_params,
            "chat_template_kwargs": chat_template_kwargs,
        },
        batch_size=batch_size,
        batch_format="pyarrow",
        # Ray Data's actor pools restart an actor that dies (max_restarts=-1) and retry the batches it
        # held (max_task_retries=-1) by default: a failed batch yields no rows, its retry all of them
        compute=ray.data.ActorPoolStrategy(size=replicas),
        **replica_resources(config),
    )
