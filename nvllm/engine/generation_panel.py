"""The terminal panel of `generate`: a bar counting the call's tokens (its rate and ETA are tqdm's), with the
engine's state after its last step as the postfix: the batch, KV-cache use, and the requests by state.

The engine's numbers are cheap reads, yet a call runs thousands of steps a second on small batches: the
postfix is recomputed at most every `REFRESH_S` seconds, and once more when the call ends."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from nvllm.engine.progress import progress_bar
from nvllm.scheduler.sequence import Sequence

if TYPE_CHECKING:
    from nvllm.engine.llm_engine import LLMEngine

REFRESH_S = 0.25


class GenerationPanel:
    """`with GenerationPanel(engine, seqs, enabled) as panel:` then `panel.refresh()` after each step."""

    def __init__(self, engine: LLMEngine, seqs: list[Sequence], enabled: bool):
        # counted in tokens, not requests: a batch run finishes its first request late, while tokens flow
        # from the first steps on (a rate and an ETA at once); a request that stops early counts its budget
        self.budgets = [engine.scheduler.stops.tokens_left(seq, seq.num_prompt_tokens) for seq in seqs]
        self.engine, self.seqs = engine, seqs
        self.bar = progress_bar(sum(self.budgets), "Generating", enabled=enabled, unit="tok")
        self.preemptions_before = engine.scheduler.num_preemptions
        self.refreshed_at = float("-inf")

    def __enter__(self) -> GenerationPanel:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is None:
            self.refresh(final=True)
        self.bar.close()

    def refresh(self, final: bool = False) -> None:
        """The bar and its postfix as the engine is now; skipped within `REFRESH_S` of the last one."""
        now = time.monotonic()
        if self.bar.disable or (now - self.refreshed_at < REFRESH_S and not final):
            return
        self.refreshed_at = now
        done = [seq.is_finished for seq in self.seqs]
        generated = sum(
            budget if finished else seq.num_completion_tokens
            for seq, budget, finished in zip(self.seqs, self.budgets, done)
        )
        self.bar.update(generated - self.bar.n)
        self.bar.set_postfix_str(self.postfix(sum(done)), refresh=False)

    def postfix(self, num_finished: int) -> str:
        engine, scheduler, blocks = self.engine, self.engine.scheduler, self.engine.block_manager
        num_used = blocks.num_blocks - blocks.num_free_blocks
        return (
            f"batch {engine.last_batch_size} | "
            f"KV {num_used}/{blocks.num_blocks} {num_used / max(blocks.num_blocks, 1):.0%} | "
            f"running {len(scheduler.running)} waiting {len(scheduler.waiting)} "
            f"finished {num_finished}/{len(self.seqs)} "
            f"preempted {scheduler.num_preemptions - self.preemptions_before}"
        )
