"""Batch inference over a dataset of prompts: rows in, the same rows with their completions out.

`run_batch` (files to files, resumable by `id`), `generate_dataset` (a Ray Dataset in, one out, for a
user's own Ray Data pipeline) and `Replica` (one engine that completes batches of rows). Ray is imported
only by what uses it: `pip install -e ".[ray]"`."""

from nvllm.batch.ray_data import generate_dataset
from nvllm.batch.replica import Replica
from nvllm.batch.run import BatchSummary, run_batch

__all__ = ["BatchSummary", "Replica", "generate_dataset", "run_batch"]
