"""The `batch` experiment's config: where the rows come from and go, how many engine replicas complete them,
and the sampling parameters of every row (`batch.sampling.*`, typed from `SamplingParams`' own fields)."""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any

from nvllm.sampling_params import SamplingParams

# What a row's output cannot show: its columns are the first sample's, without log-probabilities
LEFT_OUT = ("n", "logprobs")
PLAIN_TYPES = (int, float, bool, str, int | None, float | None, list[int] | None)


def _sampling_schema() -> type:
    """A writable dataclass of SamplingParams' fields and defaults (one owner: SamplingParams); a type that
    OmegaConf cannot hold (`stop`: a string or a list) is typed Any there and checked by SamplingParams."""
    hints = typing.get_type_hints(SamplingParams)
    specs = []
    for spec in dataclasses.fields(SamplingParams):
        if spec.init and spec.name not in LEFT_OUT:
            kind = hints[spec.name] if hints[spec.name] in PLAIN_TYPES else Any
            specs.append((spec.name, kind, field(default=spec.default)))
    schema = dataclasses.make_dataclass("BatchSamplingConfig", specs)
    schema.__module__ = __name__  # found again by name when a launcher pickles a job's config
    return schema


BatchSamplingConfig = _sampling_schema()


@dataclass
class BatchConfig:
    input: str | None = None  # a JSONL or Parquet file of rows: a `prompt` or `messages` column
    output: str | None = None  # a dir of part files; a run into a dir that holds some rows adds the others
    format: str | None = None  # jsonl | parquet; None: the input's
    replicas: int = 1  # engines, each a Ray Data actor on tensor_parallel_size GPUs
    batch_size: int = 64  # rows a replica completes in one generate
    ray_address: str | None = None  # None: the Ray this process joined, else a local one; or a cluster's
    chat_template_kwargs: dict[str, Any] | None = None  # for `messages` rows, e.g. {enable_thinking: false}
    sampling: BatchSamplingConfig = field(default_factory=BatchSamplingConfig)


def sampling_params(batch: Any) -> SamplingParams:
    """The rows' SamplingParams from `batch.sampling` (a config node or a dict); a bad value: ValueError."""
    from omegaconf import OmegaConf

    values = OmegaConf.to_container(batch.sampling) if OmegaConf.is_config(batch.sampling) else batch.sampling
    return SamplingParams(**values)  # which checks every value
