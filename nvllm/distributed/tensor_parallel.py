"""Tensor parallelism over processes: rank 0 is the caller's process (it schedules and samples); ranks
1..N-1 are spawned workers, each with its own model shard and KV cache, that run every step rank 0 runs.

Every rank runs `ModelRunner.execute` on the same batches, with a broadcaster that differs by rank: rank 0's
sends a batch's inputs (a prefill step, or a whole decode round) through shared memory (`ShmBroadcast`),
and the workers' receive them; the tokens rank 0 samples after each step reach the others by a
torch.distributed broadcast (on the device with NCCL), and every rank writes them into its own token table.
The model's collectives (NCCL on CUDA, gloo on the CPU) keep the ranks in lockstep. A worker that raises
leaves its traceback in shared memory and exits; rank 0 notices a dead worker while it waits for the
workers or for the device (with NCCL a dead peer's collectives never end: rank 0 never waits for the device
without looking at its workers), or when its own collective fails, and raises an error that names the
worker. That collective does fail: a thread on rank 0 ends a dead worker's process group at once, with
whatever the worker forked that would hold its connections open (`worker_group`). A worker ends as soon as
rank 0's process does, whatever it is doing.

Stopping (on `shutdown`, when the engine is collected, or at interpreter exit before multiprocessing's own
exit handler would stop the workers its way) is bounded: the workers are told to stop and given
`JOIN_TIMEOUT_S`, then killed; the group is destroyed gracefully only when every worker ended cleanly,
else aborted; every rank destroys its CUDA graphs before its group (NCCL waits for the graphs that captured
its collectives); the shared memory is unlinked on every path.
"""

from __future__ import annotations

import atexit
import dataclasses
import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
import weakref
from collections.abc import Callable
from multiprocessing.connection import wait as wait_for_exit
from typing import Any, NoReturn

import numpy as np
import torch
import torch.distributed as dist

from nvllm.attention.paging import blocks_for
from nvllm.config import EngineConfig
from nvllm.distributed.group import destroy_tensor_parallel, tcp_store
from nvllm.distributed.shm_channel import ShmBroadcast, ShmReader
from nvllm.distributed.worker_group import WorkerWatch, end_group, lead_own_group
from nvllm.runner.contract import Sample, runner_attributes
from nvllm.runner.model_runner import ModelRunner
from nvllm.runner.step_inputs import StepInputs
from nvllm.sampling.sampler import SamplingBatch

SHUTDOWN = "shutdown"
JOIN_TIMEOUT_S = 10.0
EXIT_GRACE_S = 5.0  # after rank 0's collective fails, how long a dying worker gets to be seen dead
LIVENESS_CHECK_S = 0.01  # while rank 0 waits for the device, how often it looks at its workers


def message_capacity(config: EngineConfig) -> int:
    """Bytes for the largest message the scheduler config allows, a prefill step or a decode round: int32
    token arrays (ids, positions, slots, logits indices, prompt logits indices), per-sequence lengths and
    full block tables, plus room for pickling."""
    scheduler = config.scheduler
    seqs = max(scheduler.max_num_seqs, 2)
    blocks_per_seq = blocks_for(scheduler.max_model_len, config.cache.block_size)

    def step_bytes(num_tokens: int) -> int:
        return 4 * (5 * num_tokens + 5 * seqs + 1 + seqs * blocks_per_seq)

    prefill = step_bytes(max(scheduler.max_num_batched_tokens, 2))
    decode_round = scheduler.num_decode_steps * step_bytes(seqs)
    return max(prefill, decode_round) + 64 * 1024


def pack_inputs(inputs: StepInputs, num_block_columns: int) -> dict[str, Any]:
    """A step's inputs as small numpy payloads: int32 (token ids, positions and KV slots all fit), and
    block tables cut to the columns that attention reads (decode pads them to `max_model_len`)."""
    fields = {}
    for field in dataclasses.fields(inputs):
        value = getattr(inputs, field.name)
        is_tensor = isinstance(value, torch.Tensor)
        fields[field.name] = (value.numpy().astype(np.int32), str(value.dtype)) if is_tensor else value
    block_tables, dtype = fields["block_tables"]
    fields["block_tables"] = (block_tables[:, :num_block_columns], dtype, block_tables.shape[1])
    return fields


def unpack_inputs(fields: dict[str, Any]) -> StepInputs:
    used, dtype, width = fields["block_tables"]
    block_tables = np.zeros((used.shape[0], width), dtype=np.int32)  # columns past a sequence are never read
    block_tables[:, : used.shape[1]] = used
    fields = {**fields, "block_tables": (block_tables, dtype)}
    return StepInputs(
        **{
            name: torch.from_numpy(value[0]).to(getattr(torch, value[1].removeprefix("torch.")))
            if isinstance(value, tuple)
            else value
            for name, value in fields.items()
        }
    )


def _worker_main(
    config: EngineConfig, rank: int, store_port: int, reader: ShmReader, num_threads: int
) -> None:
    """A worker rank's process. A failure is reported through shared memory. The process ends with its exit
    handlers (they stop helpers such as inductor's compile workers) but without the interpreter's teardown,
    which takes seconds with torch loaded while rank 0 waits for the exit."""
    lead_own_group()  # before it starts anything (see worker_group)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is rank 0's to handle; it then stops the workers
    threading.Thread(target=_exit_with_rank0, args=(rank,), name="nvllm-rank0-watch", daemon=True).start()
    torch.set_num_threads(num_threads)  # on the CPU, a thread budget the caller set holds for every rank
    reader.open()
    exit_code = 0
    try:
        _serve(config, rank, store_port, reader)
    except BaseException:
        exit_code = 1
        error = traceback.format_exc()
        reader.report_error(error)
        print(f"tensor-parallel worker rank {rank} failed:\n{error}", file=sys.stderr)
    finally:
        reader.close()
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(exit_code)


def _exit_with_rank0(rank: int) -> None:
    """End this worker as soon as rank 0's process ends, whatever the worker is doing at that moment (waiting
    for a message, or blocked in a collective that will never complete)."""
    wait_for_exit([multiprocessing.parent_process().sentinel])
    print(f"tensor-parallel worker rank {rank}: rank 0 is gone, exiting", file=sys.stderr, flush=True)
    os._exit(1)


class ShutdownRequested(Exception):
    """Rank 0 told the workers to stop."""


class _GroupBroadcaster:
    """A step's sampled tokens, from rank 0 to every rank (in place: the workers pass a buffer)."""

    def tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        dist.broadcast(tokens, src=0)  # on the device with NCCL: the host does not wait for it
        return tokens


class Rank0Broadcaster(_GroupBroadcaster):
    def __init__(self, workers: _Workers):
        self.workers = workers

    def steps(self, steps: list[StepInputs] | None) -> list[StepInputs]:
        """All of a batch's steps in one message."""
        # one width for every step: the steps of a round share one block table (the last step's reach)
        longest = max(int(step.seqlens_k.max()) for step in steps)
        columns = blocks_for(longest, self.workers.config.cache.block_size)
        self.workers.broadcast([pack_inputs(step, columns) for step in steps])
        return steps


class WorkerBroadcaster(_GroupBroadcaster):
    def __init__(self, reader: ShmReader):
        self.reader = reader

    def steps(self, steps: list[StepInputs] | None) -> list[StepInputs]:
        message = self.reader.receive()
        if message == SHUTDOWN:
            raise ShutdownRequested
        return [unpack_inputs(fields) for fields in message]


def _serve(config: EngineConfig, rank: int, store_port: int, reader: ShmReader) -> None:
    """Build this rank's shard, then run every batch rank 0 broadcasts, until told to stop."""
    store = tcp_store(store_port, config.parallel.tensor_parallel_size)
    store.set(f"joining/{rank}", "1")
    runner = ModelRunner(config, rank, WorkerBroadcaster(reader), store)
    stopped_cleanly = False
    try:
        while True:
            runner.execute(None)  # the tokens are rank 0's to sample
    except ShutdownRequested:
        stopped_cleanly = True  # between batches: every collective of this rank has a match on the others
    finally:
        runner.shutdown(abort=not stopped_cleanly)


class _Workers:
    """The worker processes, the channel to them and rank 0's own runner (`rank0`, once built); `stop` is
    also the engine's finalizer, so it must not hold the engine itself."""

    def __init__(self, config: EngineConfig):
        self.config = config
        self.context = torch.multiprocessing.get_context("spawn")
        self.store = tcp_store(0, config.parallel.tensor_parallel_size)
        num_workers = config.parallel.tensor_parallel_size - 1
        self.channel = ShmBroadcast(message_capacity(config), num_workers, self.context)
        self.processes: list[multiprocessing.Process] = []  # started ones only
        self.rank0: ModelRunner | None = None
        self.healthy = True
        self.watch: WorkerWatch | None = None

    def start(self) -> None:
        num_threads = torch.get_num_threads()
        for rank in range(1, self.config.parallel.tensor_parallel_size):
            process = self.context.Process(
                target=_worker_main,
                args=(self.config, rank, self.store.port, self.channel.reader(rank - 1), num_threads),
                name=f"nvllm-tp-rank{rank}",
                daemon=True,
            )
            process.start()
            self.processes.append(process)
        self.watch = WorkerWatch([process.pid for process in self.processes])
        # Rank 0 joins the group only once every worker is about to: a worker that dies during start-up
        # would otherwise leave rank 0 in the rendezvous until the collective timeout.
        for rank in range(1, len(self.processes) + 1):
            while not self.store.check([f"joining/{rank}"]):
                wait_for_exit([p.sentinel for p in self.processes], timeout=0.05)
                self.check()

    def check(self) -> None:
        """Raise if a worker has exited: it can only do so after an error, or when told to stop."""
        for rank, process in enumerate(self.processes, start=1):
            if process.exitcode is not None:
                self.healthy = False
                raise RuntimeError(self.describe_exit(rank, process))

    def describe_exit(self, rank: int, process: multiprocessing.Process) -> str:
        code, error = process.exitcode, self.channel.error(rank - 1)
        what = f"tensor-parallel worker rank {rank} (pid {process.pid})"
        if code < 0:
            return f"{what} was killed by {signal.Signals(-code).name}"
        if error:
            return f"{what} failed:\n{error}"
        return (
            f"{what} exited with code {code} before it ran any nvllm code (its stderr says why). Workers are "
            "spawned and re-import the main module: a script must create engines under "
            "`if __name__ == '__main__':`"
        )

    def failure(self, error: BaseException) -> BaseException:
        """The error to raise for `error` on rank 0: a worker's exit when one explains it, else `error`
        itself. A failed collective (a RuntimeError) usually means a peer died: it gets a moment to be seen
        dead; Ctrl-C does not wait."""
        self.healthy = False
        grace_s = EXIT_GRACE_S if isinstance(error, RuntimeError) else 0
        exiting = wait_for_exit([p.sentinel for p in self.processes], timeout=grace_s)
        for rank, process in enumerate(self.processes, start=1):
            if process.sentinel in exiting:
                process.join()  # its pipe closes a moment before the exit code can be read
            if process.exitcode is not None:
                return RuntimeError(self.describe_exit(rank, process))
        return error

    def broadcast(self, message: Any) -> None:
        self.channel.send(message, self.check)

    def stop(self) -> None:
        """Ask the workers to stop (when they can still listen), end them if they do not, release rank 0's
        runner and the group, and unlink the shared memory. Safe after any failure and bounded in time;
        the finalizer makes sure it runs once."""
        try:
            if self.healthy:
                try:
                    self.broadcast(SHUTDOWN)
                except RuntimeError:
                    self.healthy = False  # a worker is already gone: ended below
            for process in self.processes:
                process.join(JOIN_TIMEOUT_S if self.healthy else 0)
            # graceful only if every worker ended on the message: then each rank ran the same collectives
            clean = self.healthy and all(process.exitcode == 0 for process in self.processes)
            for process in self.processes:
                if process.is_alive():
                    process.kill()
                end_group(process.pid)  # what it left behind would keep its sentinel, and so join, waiting
                process.join()
            if self.watch is not None:
                self.watch.stop()
            self.healthy = False
            if self.rank0 is not None:
                self.rank0.shutdown(abort=not clean)
            else:
                destroy_tensor_parallel(abort=not clean)
        finally:
            self.channel.close()
            self.processes, self.store, self.rank0 = [], None, None


class TensorParallelRunner:
    """Rank 0's model runner (its own shard) driving the worker ranks: the `Runner` the engine holds instead
    of a `ModelRunner` when `parallel.tensor_parallel_size > 1`. Any failure stops every rank."""

    def __init__(self, config: EngineConfig):
        # checked before anything starts, so that whatever group exists when this runner stops is its own
        if dist.is_initialized():
            raise RuntimeError(
                "torch.distributed is already initialized in this process (another tensor-parallel engine?): "
                "shut it down first"
            )
        self.workers = _Workers(config)
        # Runs on shutdown, on garbage collection, or at interpreter exit, whichever comes first. At exit,
        # before multiprocessing's exit handler (registered when it was imported, so it runs after this one),
        # which would otherwise terminate the daemonic workers and then wait for them without a bound.
        self._finalizer = weakref.finalize(self, self.workers.stop)
        self._finalizer.atexit = False
        atexit.register(self._finalizer)
        try:
            self.workers.start()
            self.runner = self.workers.rank0 = ModelRunner(
                config, 0, Rank0Broadcaster(self.workers), self.workers.store
            )
        except BaseException as error:
            self._stop_after(error)
        for name in runner_attributes():  # the engine sees rank 0's device, backend, blocks, timings...
            setattr(self, name, getattr(self.runner, name))

    @property
    def shm_name(self) -> str:
        return self.workers.channel.name

    @property
    def worker_pids(self) -> list[int]:
        return [process.pid for process in self.workers.processes]

    def execute(
        self,
        steps: list[StepInputs],
        sampling: SamplingBatch,
        wrap_sample: Callable[[Sample], Sample] | None = None,
    ) -> torch.Tensor:
        """`ModelRunner.execute` on every rank (rank 0 samples). After a half-run batch the ranks'
        collectives can no longer be matched up: any failure ends every rank."""
        if not self.workers.healthy:
            raise RuntimeError("the tensor-parallel workers were stopped after an error: create a new engine")
        try:
            return self.runner.execute(steps, sampling, wrap_sample)
        except BaseException as error:
            self._stop_after(error)

    def wait_for_device(self, event: torch.cuda.Event) -> None:
        """Wait for `event` (the copy of a batch's tokens), raising if a worker dies meanwhile: with NCCL
        a dead peer leaves rank 0's collectives, and so the event, waiting forever. Checked once more when
        the event is done: torch's watchdog may have aborted the collectives (their results are garbage)."""
        next_check = time.monotonic() + LIVENESS_CHECK_S
        while not event.query():
            if time.monotonic() >= next_check:
                self._check_workers()
                next_check = time.monotonic() + LIVENESS_CHECK_S
        self._check_workers()

    def _check_workers(self) -> None:
        try:
            self.workers.check()
        except RuntimeError as error:
            self._stop_after(error)

    def _stop_after(self, error: BaseException) -> NoReturn:
        failure = self.workers.failure(error)
        self._finalizer()
        if failure is error:
            raise error
        raise failure from error

    def shutdown(self) -> None:
        self._finalizer()
        atexit.unregister(self._finalizer)
