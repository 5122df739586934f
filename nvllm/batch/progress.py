"""A batch run's progress: rows done, rows/s and output tokens/s, on a tqdm bar and in the summary."""

from __future__ import annotations

import time
from dataclasses import dataclass

from tqdm import tqdm

from nvllm.engine.rates import tokens_per_second


@dataclass(frozen=True)
class BatchSummary:
    rows_total: int  # the input's
    rows_skipped: int  # already in the output when the run started
    rows_written: int  # by this run
    prompt_tokens: int
    output_tokens: int
    wall_s: float
    rows_per_s: float
    output_tok_per_s: float
    replicas: int
    on_ray: bool  # Ray Data replicas, or one engine in this process


class BatchProgress:
    def __init__(self, rows_pending: int, show: bool = True):
        self.bar = tqdm(total=rows_pending, desc="Rows", unit="row", disable=not show)
        self.rows = self.prompt_tokens = self.output_tokens = 0
        self.start = time.perf_counter()

    def add(self, rows: list[dict]) -> None:
        self.rows += len(rows)
        self.prompt_tokens += sum(row["num_prompt_tokens"] for row in rows)
        self.output_tokens += sum(len(row["token_ids"]) for row in rows)
        self.bar.update(len(rows))
        self.bar.set_postfix_str(f"{tokens_per_second(self.output_tokens, self.elapsed()):.1f} tok/s")

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def summary(self, rows_total: int, rows_skipped: int, replicas: int, on_ray: bool) -> BatchSummary:
        self.bar.close()
        wall_s = self.elapsed()
        return BatchSummary(
            rows_total=rows_total,
            rows_skipped=rows_skipped,
            rows_written=self.rows,
            prompt_tokens=self.prompt_tokens,
            output_tokens=self.output_tokens,
            wall_s=wall_s,
            rows_per_s=tokens_per_second(self.rows, wall_s),  # the same rate rule, over rows
            output_tok_per_s=tokens_per_second(self.output_tokens, wall_s),
            replicas=replicas,
            on_ray=on_ray,
        )
