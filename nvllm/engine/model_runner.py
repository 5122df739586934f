"""One rank's model: builds it, sizes and owns its KV cache, compiles and captures it, runs a step's
inputs (built by `StepInputBuilder`) through it and, on rank 0, samples."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import torch
import torch.distributed as dist

from nvllm.config import EngineConfig, resolve_device
from nvllm.distributed import destroy_tensor_parallel, init_tensor_parallel, min_over_ranks
from nvllm.engine.cuda_graphs import PREFILL_BUCKETS, DecodeGraphs, PrefillGraphs
from nvllm.engine.scheduler import ScheduledBatch
from nvllm.engine.step_inputs import StepInputBuilder, StepInputs, capture_sizes, to_device_round
from nvllm.layers.attention import Attention, AttentionMetadata
from nvllm.layers.sampler import Sampler
from nvllm.models import model_class
from nvllm.models.weights import checkpoint_tensors, load_weights, random_tensors
from nvllm.ops import resolve_backend
from nvllm.sampling_params import SamplingParams
from nvllm.transfer import to_device

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


class LaunchedBatch:
    """A batch queued on the device: its sampled tokens there (`[padded rows, steps]`, None when it
    samples nothing) and, on CUDA, their copy to pinned host memory, under way."""

    def __init__(self, batch: ScheduledBatch, tokens: torch.Tensor | None):
        self.batch, self.tokens = batch, tokens
        self._host, self._copied = tokens, None
        if tokens is not None and tokens.is_cuda:
            self._host = torch.empty(tokens.shape, dtype=tokens.dtype, pin_memory=True)
            self._host.copy_(tokens, non_blocking=True)
            self._copied = torch.cuda.Event()
            self._copied.record()

    def host_tokens(self) -> torch.Tensor:
        if self._host is None:
            return torch.empty(0, 0, dtype=torch.int64)
        if self._copied is not None:
            self._copied.synchronize()
        return self._host


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
        self.backend = resolve_backend(config.attention.backend, self.device, config.cache.block_size)
        self.timings = {"load_s": 0.0, "compile_s": 0.0, "capture_s": 0.0}
        enabled = config.compile.enabled
        self.compile_enabled = self.device.startswith("cuda") if enabled is None else enabled
        # The torch backend syncs with the host inside attention: it cannot be captured in a CUDA graph.
        manual_graphs = config.compile.cuda_graphs == "manual"
        self.use_cuda_graphs = (
            self.compile_enabled
            and self.device.startswith("cuda")
            and self.backend == "flash_attn"
            and (config.compile.mode == "reduce-overhead" or manual_graphs)
        )
        self.decode_graphs: DecodeGraphs | None = None
        self.prefill_graphs: PrefillGraphs | None = None
        self.sampler = Sampler(compiled=self.compile_enabled and self.device.startswith("cuda"))
        max_graph_batch = min(config.scheduler.max_num_seqs, config.compile.max_capture_batch_size)
        self.inputs = StepInputBuilder(
            self.block_size,
            config.scheduler.max_model_len,
            config.scheduler.max_num_batched_tokens,
            capture_sizes(max_graph_batch) if self.use_cuda_graphs else [],
        )

        start = time.perf_counter()
        self.model = self._build_model()
        self.timings["load_s"] = time.perf_counter() - start
        self.num_blocks = self._allocate_kv_cache()
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
        useful = self.config.scheduler.max_num_seqs * self.inputs.max_blocks_per_seq  # more is never used
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
            for cache in (layer.k_cache, layer.v_cache):
                torch._dynamo.mark_static_address(cache, guard=False)
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
        self._run_model(self.inputs.dummy_prefill(), compiled=False)
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
        total = torch.cuda.get_device_properties(self.device).total_memory
        free_now, _ = torch.cuda.mem_get_info()
        used_by_others = total - free_now - torch.cuda.memory_reserved()
        budget = total * self.config.cache.gpu_memory_utilization - used_by_others - peak
        return int(budget // self._kv_bytes_per_block())

    def _compile(self) -> None:
        """Decode: compiled in the configured mode and captured at start-up for every padded batch size,
        by inductor's graph trees (reduce-overhead) or by hand (`compile.cuda_graphs=manual`). Prefill:
        eager, or compiled without CUDA graphs (the same graph as decode unless that one is inductor's)
        except for small steps, recorded by hand per token bucket (`compile.max_prefill_graph_tokens`).
        The sampler compiles on its first (sampling, not greedy) calls, made here."""
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
        # Python floats (norm eps, attention scale) as constants. Left symbolic under dynamic=True, each
        # one makes inductor's scalar pass restart the analysis: every compile would trace the model twice.
        torch._dynamo.config.specialize_float = True

        def forward(*args):
            return model(*args)

        manual_graphs = self.use_cuda_graphs and compile_config.cuda_graphs == "manual"
        decode_mode = compile_config.mode if self.device.startswith("cuda") else "default"
        if decode_mode == "reduce-overhead" and (manual_graphs or not self.use_cuda_graphs):
            decode_mode = "default"  # graphs recorded by hand, or none possible: inductor adds none
        self._decode_forward = torch.compile(forward, mode=decode_mode, fullgraph=True, dynamic=True)
        if compile_config.compile_prefill and decode_mode == "default":
            # One graph for both: a decode step is a batch of one-token sequences, and every size and bound
            # the graph takes is symbolic (StepInputs pads them past 1). One trace and one inductor compile
            # at start-up instead of two; traced at a decode batch first, so that inductor tunes its
            # kernels for decode, whose speed matters most.
            self._prefill_forward = self._decode_forward
        elif compile_config.compile_prefill:  # decode in inductor's CUDA graphs: a mode of its own

            def prefill_forward(*args):  # its own code object: dynamo keeps compiled code per code object
                return model(*args)

            self._prefill_forward = torch.compile(prefill_forward, fullgraph=True, dynamic=True)
        logits = self._run_model(self.inputs.dummy_decode(2))
        if self._prefill_forward is not self.model:
            self._run_model(self.inputs.dummy_prefill(min_tokens=True))
        for num_rows in (2, self.sampler.CHUNKED_MAX_ROWS + 1):  # both of its graphs
            sampling = self.sampler.prepare([SamplingParams()] * num_rows, [None] * num_rows, self.device)
            self.sampler.sample(logits[:1].expand(num_rows, -1).contiguous(), sampling)
        self.timings["compile_s"] = time.perf_counter() - start
        start = time.perf_counter()
        if manual_graphs:
            self.decode_graphs = DecodeGraphs(self._decode_forward, self.inputs, self.device)
            budget = self.config.scheduler.max_num_batched_tokens
            max_tokens = min(compile_config.max_prefill_graph_tokens, budget)
            if compile_config.compile_prefill and max_tokens >= PREFILL_BUCKETS[0]:
                self.prefill_graphs = PrefillGraphs(
                    self._prefill_forward, self.inputs, self.device, max_tokens, self.decode_graphs.pool
                )
        elif self.use_cuda_graphs:
            # largest first: the others reuse its pool
            for batch_size in reversed(self.inputs.decode_batch_sizes):
                for _ in range(2):  # the first run warms up, the second records
                    self._run_model(self.inputs.dummy_decode(batch_size))
            torch.cuda.synchronize()
        self.timings["capture_s"] = time.perf_counter() - start
        self.decode_guards_checked = True

    # no_grad, not inference_mode: tensors made under inference mode carry other dispatch keys, and the
    # compiled graphs (which guard on them) see inputs made both inside and outside this call
    @torch.no_grad()
    def _run_model(self, inputs: StepInputs, compiled: bool = True) -> torch.Tensor:
        graphs = self.prefill_graphs if inputs.is_prefill else self.decode_graphs
        if compiled and graphs is not None and graphs.holds(inputs):
            return graphs.run(inputs)  # copies the inputs into the graphs' own buffers

        def on_device(tensor):
            return to_device(tensor, self.device) if tensor is not None else None

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

    def run(self, batch: ScheduledBatch) -> list[list[int]]:
        """Every step of `batch`; for each of `batch.sampled_seqs`, the tokens sampled for it: one in
        prefill, one per step of the round in decode (the scheduler keeps the steps the sequence took)."""
        return self.collect(self.launch(batch))

    def launch(self, batch: ScheduledBatch, after: LaunchedBatch | None = None) -> LaunchedBatch:
        """Queue every step of `batch` on the device and start copying its sampled tokens to the host;
        nothing here waits for the device. Each decode step takes its input tokens from the step before,
        on the device; the first step of a round that follows the in-flight round `after` takes that
        round's last tokens."""
        steps = self.inputs.build(batch)
        self.dispatch(steps)
        sampled_seqs = batch.sampled_seqs
        sampling = self.sampler.prepare(
            [seq.sampling_params for seq in sampled_seqs],
            [seq.generator for seq in sampled_seqs],
            self.device,
            num_rows=steps[0].num_logits,
            num_steps=None if batch.is_prefill else batch.num_new_tokens,
        )
        tokens: list[torch.Tensor] = []
        carried = None
        if batch.follows_in_flight:
            carried = self._carried_input_ids(batch, after, steps[0].num_logits)

        def sampled_input_ids(num_rows: int) -> torch.Tensor:
            # sampled over every row of the padded batch: already the `num_rows` ids the next step takes
            return self.share_input_ids(tokens[-1] if tokens else carried)

        for step, logits in enumerate(self.forward_steps(steps, sampled_input_ids)):
            if sampled_seqs:
                tokens.append(self.sampler.sample(logits, sampling, step))
        return LaunchedBatch(batch, torch.stack(tokens, dim=1) if tokens else None)

    def collect(self, launched: LaunchedBatch) -> list[list[int]]:
        """The tokens of a launched batch (waits for its copy only, not for work launched after it)."""
        return launched.host_tokens()[: len(launched.batch.sampled_seqs)].tolist()

    def _carried_input_ids(self, batch: ScheduledBatch, after: LaunchedBatch, num_rows: int) -> torch.Tensor:
        """Each sequence's last token of the round `after`, on the device, as the padded batch's input ids."""
        row_of = {seq.seq_id: row for row, seq in enumerate(after.batch.seqs)}
        rows = [row_of[seq.seq_id] for seq in batch.seqs]
        columns = [after.batch.num_new_tokens[row] - 1 for row in rows]
        num_padding = num_rows - len(rows)  # padded rows read any token
        index = torch.tensor([rows + [0] * num_padding, columns + [0] * num_padding], dtype=torch.int64)
        index = to_device(index, self.device)
        return after.tokens[index[0], index[1]]

    def forward_steps(
        self, steps: list[StepInputs], next_input_ids: Callable[[int], torch.Tensor]
    ) -> Iterator[torch.Tensor]:
        """The logits of each step in turn; the next step runs once the caller has taken them. A decode
        round's inputs are copied to the device up front, so that no step waits for a copy; a step without
        input ids gets them from `next_input_ids(num_rows)`."""
        if not steps[0].is_prefill:
            steps = to_device_round(steps, self.device)
        for inputs in steps:
            if inputs.input_ids is None:
                inputs.input_ids = next_input_ids(inputs.positions.shape[0])
            yield self._run_model(inputs)

    def dispatch(self, steps: list[StepInputs]) -> None:
        """Hand a batch's steps to the other ranks: nothing to do without tensor parallelism."""

    def share_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        """A decode step's input ids, sampled on this rank, as every rank needs them."""
        return input_ids

    def shutdown(self) -> None:
        for layer in self._attention_layers():
            layer.k_cache = layer.v_cache = torch.empty(0)
        self.model = self._prefill_forward = self._decode_forward = None
        self.decode_graphs = self.prefill_graphs = None
        if self.device.startswith("cuda"):
            # cuBLAS keeps a workspace (32 MiB on the H200) per stream it ran on, the CUDA-graph capture
            # stream included: released here, so that an engine leaves memory where it found it
            clear_cublas_workspaces = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
            if clear_cublas_workspaces is not None:
                clear_cublas_workspaces()
            torch.cuda.empty_cache()
        if self.config.parallel.tensor_parallel_size > 1:
            destroy_tensor_parallel()
