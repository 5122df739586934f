"""`run_batch`: an input file of rows through N engine replicas into an output dir, resumable. Rows are
known by `id`: those whose ids the output already holds are skipped (and counted), the others written in
part files as batches finish. With one replica and no Ray installed, the one engine runs in this process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from nvllm.batch.files import OutputDir, file_format, read_input
from nvllm.batch.progress import BatchProgress, BatchSummary
from nvllm.batch.ray_data import generate_dataset, ray_installed
from nvllm.batch.replica import Replica
from nvllm.batch.rows import ID_COLUMN
from nvllm.config import EngineConfig
from nvllm.sampling_params import SamplingParams


def _in_process(rows: list[dict], replica: Replica, batch_size: int) -> Iterator[list[dict]]:
    for start in range(0, len(rows), batch_size):
        yield replica.complete(rows[start : start + batch_size])


def _on_ray(rows: list[dict], ray_address: str | None, **generate_args) -> Iterator[list[dict]]:
    import ray
    import ray.data

    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=ray_address)
    try:
        completed = generate_dataset(ray.data.from_items(rows), **generate_args)
        for batch in completed.iter_batches(batch_size=None, batch_format="pyarrow"):
            yield batch.to_pylist()
    finally:
        if started_here:
            ray.shutdown()


def run_batch(
    input_path: str | Path,
    output_dir: str | Path,
    config: EngineConfig,
    sampling_params: SamplingParams,
    replicas: int = 1,
    batch_size: int = 64,
    output_format: str | None = None,
    chat_template_kwargs: dict | None = None,
    ray_address: str | None = None,
    show_progress: bool = True,
    replica_class: type[Replica] = Replica,
) -> BatchSummary:
    """Complete the input's rows not yet in `output_dir`; the summary of what this run did. Ray is used when
    installed (a local instance, or the cluster at `ray_address`, unless this process already joined one);
    without it only one replica can run, in this process. `output_format`: jsonl | parquet (None: the
    input's)."""
    if replicas < 1 or batch_size < 1:
        raise ValueError(f"batch.replicas={replicas} and batch.batch_size={batch_size} must be at least 1")
    on_ray = ray_installed()
    if replicas > 1 and not on_ray:
        raise ValueError(f'batch.replicas={replicas} needs Ray: pip install -e ".[ray]", or batch.replicas=1')
    rows = read_input(input_path)
    output = OutputDir(output_dir, output_format or file_format(Path(input_path)))
    done = output.done_ids()
    pending = [row for row in rows if row[ID_COLUMN] not in done]
    skipped = len(rows) - len(pending)
    if skipped:
        print(f"{skipped} of {len(rows)} rows already in {output.path}: skipped")
    progress = BatchProgress(len(pending), show_progress)
    if pending:
        if on_ray:
            batches = _on_ray(
                pending,
                ray_address,
                config=config,
                sampling_params=sampling_params,
                replicas=replicas,
                batch_size=batch_size,
                chat_template_kwargs=chat_template_kwargs,
                replica_class=replica_class,
            )
            for batch in batches:
                output.write(batch)
                progress.add(batch)
        else:
            replica = replica_class(config, sampling_params, chat_template_kwargs)
            try:
                for batch in _in_process(pending, replica, batch_size):
                    output.write(batch)
                    progress.add(batch)
            finally:
                replica.shutdown()
    return progress.summary(len(rows), skipped, replicas, on_ray)
