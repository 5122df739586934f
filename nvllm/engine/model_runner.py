"""One rank's model: builds it, sizes and owns its KV cache, turns a scheduled batch into flat tensors,
runs the (compiled) forward pass and, on rank 0, samples."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from nvllm.config import EngineConfig, resolve_device
from nvllm.distributed import destroy_tensor_parallel, init_tensor_parallel, min_over_ranks
from nvllm.engine.scheduler import ScheduledBatch
from nvllm.layers.attention import Attention, AttentionMetadata
from nvllm.layers.sampler import Sampler
from nvllm.models import model_class
from nvllm.models.weights import checkpoint_tensors, load_weights, random_tensors
from nvllm.ops import resolve_backend

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


@dataclass
class StepInputs:
    """A step's model inputs, built on rank 0 (CPU tensors) and sent as they are to the other ranks."""

    input_ids: torch.Tensor
    positions: torch.Tensor
    slot_mapping: torch.Tensor
    cu_seqlens_q: torch.Tensor
    seqlens_k: torch.Tensor
    block_tables: torch.Tensor
    max_seqlen_q: int
    max_seqlen_k: int
    logits_indices: torch.Tensor | None  # None in decode: every row is a sequence's last token
    is_prefill: bool


def capture_sizes(max_batch_size: int) -> list[int]:
    """Decode batch sizes that get a CUDA graph; a batch runs in the smallest one that holds it. Size 1 is
    left out: dynamo specialises on it, which would cost a second compile."""
    sizes = [2, 4, 8] + list(range(16, max_batch_size + 16, 16))
    return sorted({min(size, max(max_batch_size, 2)) for size in sizes})


def padded(values: list[int], size: int, fill: int) -> list[int]:
    return values + [fill] * (size - len(values))


class ModelRunner:
    def __init__(self, config: EngineConfig, rank: int = 0, tp_store: dist.Store | None = None):
        """`tp_store`: the rendezvous store of the tensor-parallel group, when tensor_parallel_size > 1."""
        self.config = config
        self.rank = rank
        self.device = resolve_device(config.device)
        if self.device == "cuda":
            self.device = f"cuda:{rank}"
        if self.device.startswith("cuda"):
            torch.cuda.set_device(self.device)
        if config.parallel.tensor_parallel_size > 1:
            init_tensor_parallel(tp_store, rank, config.parallel.tensor_parallel_size, self.device)
        self.dtype = self._resolve_dtype()
        self.block_size = config.cache.block_size
        self.max_blocks_per_seq = -(-config.scheduler.max_model_len // self.block_size)
        self.backend = resolve_backend(config.attention.backend, self.device)
        self.sampler = Sampler()
        self.timings = {"load_s": 0.0, "compile_s": 0.0, "capture_s": 0.0}

        start = time.perf_counter()
        self.model = self._build_model()
        self.timings["load_s"] = time.perf_counter() - start
        self.num_blocks = self._allocate_kv_cache()
        enabled = config.compile.enabled
        self.compile_enabled = self.device.startswith("cuda") if enabled is None else enabled
        self.use_cuda_graphs = (
            self.compile_enabled
            and self.device.startswith("cuda")
            and config.compile.mode == "reduce-overhead"
        )
        self.decode_batch_sizes = capture_sizes(
            min(config.scheduler.max_num_seqs, config.compile.max_capture_batch_size)
        )
        self._compile()

    # ---- construction -------------------------------------------------------------------------------
    def _resolve_dtype(self) -> torch.dtype:
        if self.config.model.dtype == "auto":
            return torch.bfloat16 if self.device.startswith("cuda") else torch.float32
        return DTYPES[self.config.model.dtype]

    def _build_model(self) -> torch.nn.Module:
        model_config = self.config.model
        default_dtype = torch.get_default_dtype()
        torch.set_default_dtype(self.dtype)
        try:
            with torch.device(self.device):
                model = model_class(model_config.architecture)(model_config)
        finally:
            torch.set_default_dtype(default_dtype)
        if model_config.path is not None:
            tensors = checkpoint_tensors(model_config.path)
        else:
            tensors = random_tensors(model_config, self.config.seed, self.device)
        load_weights(model, tensors)
        for module in model.modules():
            if isinstance(module, Attention):
                module.backend = self.backend
        return model.eval()

    def _attention_layers(self) -> list[Attention]:
        return [m for m in self.model.modules() if isinstance(m, Attention)]

    def _kv_bytes_per_block(self) -> int:
        layers = self._attention_layers()
        per_layer = 2 * self.block_size * layers[0].num_kv_heads * layers[0].head_dim
        return per_layer * len(layers) * self.dtype.itemsize

    def _allocate_kv_cache(self) -> int:
        cache = self.config.cache
        useful = self.config.scheduler.max_num_seqs * self.max_blocks_per_seq  # more could never be used
        if cache.num_blocks is not None:
            num_blocks = cache.num_blocks
        elif self.device.startswith("cuda"):
            num_blocks = min(self._blocks_fitting_gpu_memory(), useful)
        else:
            num_blocks = min(int(cache.cpu_memory_gib * 2**30) // self._kv_bytes_per_block(), useful)
        num_blocks = min_over_ranks(num_blocks, self.device)
        if num_blocks < 1:
            utilization = cache.gpu_memory_utilization
            raise ValueError(f"no memory left for the KV cache (cache.gpu_memory_utilization={utilization})")
        # one tensor per layer and per K/V, not views of one big tensor: compiled graphs then see
        # independent inputs that they mutate in place, with no aliasing between them to untangle
        for layer in self._attention_layers():
            shape = (num_blocks, self.block_size, layer.num_kv_heads, layer.head_dim)
            layer.k_cache = torch.zeros(shape, dtype=self.dtype, device=self.device)
            layer.v_cache = torch.zeros(shape, dtype=self.dtype, device=self.device)
        return num_blocks

    def _blocks_fitting_gpu_memory(self) -> int:
        """Blocks that fit in `gpu_memory_utilization` of the GPU once the weights and the activations of a
        full-budget prefill (measured by running one) are accounted for."""
        layers = self._attention_layers()
        scratch = torch.zeros(
            1, self.block_size, layers[0].num_kv_heads, layers[0].head_dim, dtype=self.dtype
        )
        for layer in layers:
            layer.k_cache = layer.v_cache = scratch.to(self.device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        self._run_model(self._dummy_prefill_inputs(), compiled=False)
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
        total = torch.cuda.get_device_properties(self.device).total_memory
        free_now, _ = torch.cuda.mem_get_info()
        used_by_others = total - free_now - torch.cuda.memory_reserved()
        budget = total * self.config.cache.gpu_memory_utilization - used_by_others - peak
        return int(budget // self._kv_bytes_per_block())

    def _compile(self) -> None:
        """Prefill: compiled without CUDA graphs (token counts vary). Decode: compiled in the configured mode
        (reduce-overhead = CUDA graphs), captured at start-up for every padded batch size."""
        self._prefill_forward = self._decode_forward = self.model
        self.decode_guards_checked = False
        compile_config = self.config.compile
        if not self.compile_enabled:
            return
        start = time.perf_counter()
        model = self.model
        # Sizes that happen to be equal at trace time (tokens = head_dim, say) would otherwise be assumed
        # equal forever, and every batch that breaks the coincidence would compile again.
        torch.fx.experimental._config.use_duck_shape = False

        def prefill_forward(*args):
            return model(*args)

        def decode_forward(*args):
            return model(*args)

        if compile_config.compile_prefill:
            self._prefill_forward = torch.compile(prefill_forward, fullgraph=True, dynamic=True)
            self._run_model(self._dummy_prefill_inputs(min_tokens=True))
        decode_mode = compile_config.mode if self.device.startswith("cuda") else "default"
        self._decode_forward = torch.compile(decode_forward, mode=decode_mode, fullgraph=True, dynamic=True)
        self._run_model(self._dummy_decode_inputs(self.decode_batch_sizes[0]))
        self.timings["compile_s"] = time.perf_counter() - start
        start = time.perf_counter()
        if self.use_cuda_graphs:
            for batch_size in reversed(self.decode_batch_sizes):  # largest first: the others reuse its pool
                for _ in range(2):  # the first run warms up, the second records
                    self._run_model(self._dummy_decode_inputs(batch_size))
            torch.cuda.synchronize()
        self.timings["capture_s"] = time.perf_counter() - start
        self.decode_guards_checked = True

    # ---- dummy batches for warm-up and memory profiling ---------------------------------------------
    def _dummy_prefill_inputs(self, min_tokens: bool = False) -> StepInputs:
        """Sequences of one block each (all reading block 0), `max_num_batched_tokens` tokens in all."""
        total = 2 * self.block_size if min_tokens else self.config.scheduler.max_num_batched_tokens
        lengths = [self.block_size] * (total // self.block_size) + (
            [total % self.block_size] if total % self.block_size else []
        )
        lengths = padded(lengths, 2, 0)
        cu_seqlens = np.concatenate([[0], np.cumsum(lengths)])
        return StepInputs(
            input_ids=torch.zeros(total, dtype=torch.int64),
            positions=torch.cat([torch.arange(n) for n in lengths]),
            slot_mapping=torch.full((total,), -1, dtype=torch.int64),
            cu_seqlens_q=torch.tensor(cu_seqlens, dtype=torch.int32),
            seqlens_k=torch.tensor(lengths, dtype=torch.int32),
            block_tables=torch.zeros(len(lengths), 2, dtype=torch.int32),
            max_seqlen_q=max(2, *lengths),
            max_seqlen_k=max(2, *lengths),
            logits_indices=torch.tensor(padded([int(c) - 1 for c in cu_seqlens[1:] if c > 0], 2, 0)),
            is_prefill=True,
        )

    def _dummy_decode_inputs(self, batch_size: int) -> StepInputs:
        return StepInputs(
            input_ids=torch.zeros(batch_size, dtype=torch.int64),
            positions=torch.zeros(batch_size, dtype=torch.int64),
            slot_mapping=torch.full((batch_size,), -1, dtype=torch.int64),
            cu_seqlens_q=torch.arange(batch_size + 1, dtype=torch.int32),
            seqlens_k=torch.ones(batch_size, dtype=torch.int32),
            block_tables=torch.zeros(batch_size, self.max_blocks_per_seq, dtype=torch.int32),
            max_seqlen_q=1,
            max_seqlen_k=self.config.scheduler.max_model_len,
            logits_indices=None,
            is_prefill=False,
        )

    # ---- a step -------------------------------------------------------------------------------------
    def prepare(self, batch: ScheduledBatch) -> StepInputs:
        return self._prepare_prefill(batch) if batch.is_prefill else self._prepare_decode(batch)

    def _slots(self, block_table: list[int], positions: np.ndarray) -> np.ndarray:
        return np.asarray(block_table, dtype=np.int64)[positions // self.block_size] * self.block_size + (
            positions % self.block_size
        )

    def _prepare_prefill(self, batch: ScheduledBatch) -> StepInputs:
        """Every size is padded to at least 2 (an empty sequence, a padded token) so that a compiled graph
        never meets a size-1 dimension, which dynamo would specialise and compile again."""
        input_ids, positions, slots, cu_seqlens, seqlens_k, logits_indices = [], [], [], [0], [], []
        for seq, num_new in zip(batch.seqs, batch.num_new_tokens):
            start, end = seq.num_computed_tokens, seq.num_computed_tokens + num_new
            seq_positions = np.arange(start, end)
            input_ids.extend(seq.token_ids[start:end])
            positions.append(seq_positions)
            slots.append(self._slots(seq.block_table, seq_positions))
            cu_seqlens.append(cu_seqlens[-1] + num_new)
            seqlens_k.append(end)
            if end == len(seq):
                logits_indices.append(cu_seqlens[-1] - 1)
        num_tokens = max(len(input_ids), 2)
        num_seqs = max(len(batch.seqs), 2)
        width = max(2, max(len(seq.block_table) for seq in batch.seqs))
        block_tables = [padded(seq.block_table, width, 0) for seq in batch.seqs]
        return StepInputs(
            input_ids=torch.tensor(padded(input_ids, num_tokens, 0), dtype=torch.int64),
            positions=torch.tensor(
                padded(np.concatenate(positions).tolist(), num_tokens, 0), dtype=torch.int64
            ),
            slot_mapping=torch.tensor(
                padded(np.concatenate(slots).tolist(), num_tokens, -1), dtype=torch.int64
            ),
            cu_seqlens_q=torch.tensor(padded(cu_seqlens, num_seqs + 1, cu_seqlens[-1]), dtype=torch.int32),
            seqlens_k=torch.tensor(padded(seqlens_k, num_seqs, 0), dtype=torch.int32),
            block_tables=torch.tensor(padded(block_tables, num_seqs, [0] * width), dtype=torch.int32),
            max_seqlen_q=max(2, *batch.num_new_tokens),  # an upper bound; 1 would mean a decode batch
            max_seqlen_k=max(2, *seqlens_k),
            logits_indices=torch.tensor(
                padded(logits_indices, max(len(logits_indices), 2), 0), dtype=torch.int64
            ),
            is_prefill=True,
        )

    def _decode_batch_size(self, num_seqs: int) -> int:
        if not self.use_cuda_graphs or num_seqs > self.decode_batch_sizes[-1]:
            return max(num_seqs, 2)
        return next(size for size in self.decode_batch_sizes if size >= num_seqs)

    def _prepare_decode(self, batch: ScheduledBatch) -> StepInputs:
        """Padded to a captured batch size; block tables always `max_blocks_per_seq` wide and
        `max_seqlen_k` fixed at `max_model_len`, so that only the batch size ever changes a graph."""
        size = self._decode_batch_size(len(batch.seqs))
        positions = [len(seq) - 1 for seq in batch.seqs]
        slots = [
            seq.block_table[p // self.block_size] * self.block_size + p % self.block_size
            for seq, p in zip(batch.seqs, positions)
        ]
        block_tables = np.zeros((size, self.max_blocks_per_seq), dtype=np.int32)
        for row, seq in enumerate(batch.seqs):
            block_tables[row, : len(seq.block_table)] = seq.block_table
        return StepInputs(
            input_ids=torch.tensor(
                padded([seq.last_token for seq in batch.seqs], size, 0), dtype=torch.int64
            ),
            positions=torch.tensor(padded(positions, size, 0), dtype=torch.int64),
            slot_mapping=torch.tensor(padded(slots, size, -1), dtype=torch.int64),
            cu_seqlens_q=torch.arange(size + 1, dtype=torch.int32),
            seqlens_k=torch.tensor(padded([len(seq) for seq in batch.seqs], size, 0), dtype=torch.int32),
            block_tables=torch.from_numpy(block_tables),
            max_seqlen_q=1,
            max_seqlen_k=self.config.scheduler.max_model_len,
            logits_indices=None,
            is_prefill=False,
        )

    @torch.inference_mode()
    def _run_model(self, inputs: StepInputs, compiled: bool = True) -> torch.Tensor:
        def on_device(tensor):
            return tensor.to(self.device, non_blocking=True) if tensor is not None else None

        meta = AttentionMetadata(
            slot_mapping=on_device(inputs.slot_mapping),
            cu_seqlens_q=on_device(inputs.cu_seqlens_q),
            seqlens_k=on_device(inputs.seqlens_k),
            block_tables=on_device(inputs.block_tables),
            max_seqlen_q=inputs.max_seqlen_q,
            max_seqlen_k=inputs.max_seqlen_k,
        )
        args = (
            on_device(inputs.input_ids),
            on_device(inputs.positions),
            meta,
            on_device(inputs.logits_indices),
        )
        if not compiled or (inputs.is_prefill and self._prefill_forward is self.model):
            return self.model(*args)
        if inputs.is_prefill:
            return self._prefill_forward(*args)
        if self.use_cuda_graphs:
            torch.compiler.cudagraph_mark_step_begin()
        if not self.decode_guards_checked:
            return self._decode_forward(*args)
        # Once every padded batch size has run, the decode graph's guards can only pass (a single
        # dynamic-shape entry, fixed shapes otherwise); checking them costs ~1 ms of host time per step.
        with torch.compiler.set_stance(skip_guard_eval_unsafe=True):
            return self._decode_forward(*args)

    def execute(self, inputs: StepInputs) -> torch.Tensor:
        """This rank's share of a step; every rank gets the full logits (the LM head all-gathers)."""
        return self._run_model(inputs)

    def run(self, batch: ScheduledBatch) -> list[int]:
        """One step for `batch`: the next token of each sequence that has no uncomputed tokens left."""
        logits = self.execute(self.prepare(batch))
        sampling = [
            (seq.sampling_params, seq.generator)
            for seq, num_new in zip(batch.seqs, batch.num_new_tokens)
            if seq.num_computed_tokens + num_new == len(seq)
        ]
        if not sampling:
            return []
        params, generators = zip(*sampling)
        return self.sampler(logits[: len(params)], list(params), list(generators))

    def shutdown(self) -> None:
        for layer in self._attention_layers():
            layer.k_cache = layer.v_cache = torch.empty(0)
        self.model = self._prefill_forward = self._decode_forward = None
        if self.device.startswith("cuda"):
            torch.cuda.empty_cache()
        if self.config.parallel.tensor_parallel_size > 1:
            destroy_tensor_parallel()
