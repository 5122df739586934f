"""A scheduler on bookkeeping only (no model): its steps' sampled tokens are chosen by the test."""

from nvllm.config import SchedulerConfig
from nvllm.scheduler.block_manager import BlockManager
from nvllm.scheduler.scheduler import ScheduledBatch, Scheduler
from nvllm.scheduler.sequence import Sequence

EOS = 7
BLOCK_SIZE = 4


def bare_scheduler(num_blocks: int, **config) -> Scheduler:
    return Scheduler(SchedulerConfig(**config), BlockManager(num_blocks, BLOCK_SIZE), eos_token_ids=(EOS,))


def run_step(scheduler: Scheduler, token_id: int = 1) -> tuple[ScheduledBatch, list[Sequence]]:
    """One step (or decode round) in which every sampled token is `token_id`."""
    batch = scheduler.schedule()
    scheduler.launched(batch)
    tokens_per_seq = 1 if batch.is_prefill else batch.num_steps
    return batch, scheduler.postprocess(batch, [[token_id] * tokens_per_seq for _ in batch.sampled_seqs])
