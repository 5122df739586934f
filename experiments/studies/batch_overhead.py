"""One engine replica through Ray Data against the same requests through `LLM.generate` in this process,
in one call: output tok/s of each and their ratio, what the batch path costs.

    python -m experiments.studies.batch_overhead +experiment=bench [model=... batch.batch_size=256]
    python -m experiments.studies.batch_overhead +experiment=bench model=tiny device=cpu   # a smoke run

The workload's requests (bench: nano-vLLM's mixed lengths) become rows with their own `max_tokens`. The
in-process engine is timed after its warm-up, as the bench times it; the replica from the moment its
engine is built (its start-up left out: the actor records when it is ready) to the last row's arrival.
`batch.batch_size` rows go through the replica's engine per `generate` (its batches run one after another).
"""

from __future__ import annotations

import sys
import time

from experiments.harness.config import engine_config_from_run_config, workload_config
from experiments.harness.engine import start_engine, timed_generate, warm_up
from experiments.harness.workload import make_requests
from nvllm.batch import Replica, generate_dataset
from nvllm.engine.rates import tokens_per_second
from nvllm.run import compose_config


class TimedReplica(Replica):
    """A replica whose rows say when its engine was ready (one clock: the node's)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.ready_at = time.time()

    def complete(self, rows: list[dict]) -> list[dict]:
        return [{**row, "ready_at": self.ready_at} for row in super().complete(rows)]


def on_ray(rows: list[dict], config, params, batch_size: int) -> tuple[float, int]:
    """Output tok/s of one replica from its engine's start, and the tokens it made."""
    import ray

    ray.init()
    try:
        completed = generate_dataset(
            ray.data.from_items(rows), config, params, batch_size=batch_size, replica_class=TimedReplica
        )
        tokens, ready_at = 0, None
        for batch in completed.iter_batches(batch_size=None, batch_format="pyarrow"):
            for row in batch.to_pylist():
                tokens += len(row["token_ids"])
                ready_at = row["ready_at"] if ready_at is None else min(ready_at, row["ready_at"])
        return tokens_per_second(tokens, time.time() - ready_at), tokens
    finally:
        ray.shutdown()


def main() -> None:
    cfg = compose_config(sys.argv[1:])
    engine = engine_config_from_run_config(cfg)
    workload = workload_config(cfg, engine.device)
    with start_engine(engine) as llm:
        prompts, params = make_requests(workload, len(llm.tokenizer))
        warm_up(llm)
        in_process = timed_generate(llm, prompts, params, use_tqdm=False)[1]
    rows = [
        {"id": index, "prompt": prompt, "sampling_params": {"max_tokens": request.max_tokens}}
        for index, (prompt, request) in enumerate(zip(prompts, params, strict=True))
    ]
    # the requests differ in max_tokens only: the first one's params, each row's own max_tokens over them
    ray_rate, ray_tokens = on_ray(rows, engine, params[0], cfg.batch.batch_size)
    print(f"in-process generate: {in_process['output_tok_per_s']:.1f} output tok/s")
    batches = f"batches of {cfg.batch.batch_size} rows"
    print(f"one Ray Data replica: {ray_rate:.1f} output tok/s ({ray_tokens} tokens, {batches})")
    print(f"ratio: {ray_rate / in_process['output_tok_per_s']:.3f}")


if __name__ == "__main__":
    main()
