"""One rank's model: it builds it, sizes and owns its KV cache and token table, compiles it, and runs steps
through it — by replaying a CUDA graph (`GraphRunner`) where one holds the step, else by calling the model."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Protocol

import torch

from nvllm.attention import BACKENDS
from nvllm.attention.paging import blocks_for
from nvllm.config import EngineConfig
from nvllm.distributed.group import destroy_tensor_parallel, init_tensor_parallel, min_over_ranks
from nvllm.layers.attention import Attention
from nvllm.models import model_class
from nvllm.models.weights import checkpoint_tensors, hf_parameter_shapes, load_weights, random_tensors
from nvllm.runner.compile_cache import load_cache_artifacts
from nvllm.runner.compiled_model import CompiledModel
from nvllm.runner.contract import Sample
from nvllm.runner.dtypes import DTYPES, kv_cache_dtype
from nvllm.runner.graph_plan import GraphPlan
from nvllm.runner.graph_runner import GraphRunner
from nvllm.runner.memory import cpu_kv_budget_bytes, kv_bytes_per_block
from nvllm.runner.prefill_warm_up import prefill_warm_up_tokens
from nvllm.runner.step_inputs import StepInputs, dummy_step, to_device_round, token_table_rows
from nvllm.sampling.sampler import Sampler, SamplingBatch
from nvllm.transfer import to_device

logger = logging.getLogger(__name__)  # a line as each stage of start-up begins: the long ones say what runs


class Broadcaster(Protocol):
    """What one rank shares with the others: rank 0 has a batch's steps and samples their tokens; every
    other rank gets both from it. `steps(None)` on those ranks waits for rank 0's next batch."""

    def steps(self, steps: list[StepInputs] | None) -> list[StepInputs]: ...

    def tokens(self, tokens: torch.Tensor) -> torch.Tensor: ...


class SingleRank:
    """The broadcaster of an engine without tensor parallelism: nothing to share."""

    def steps(self, steps: list[StepInputs] | None) -> list[StepInputs]:
        return steps

    def tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        return tokens


class ModelRunner:
    """The `Runner` of one rank. Rank 0 samples (it owns the `Sampler`); the others receive its tokens."""

    def __init__(
        self,
        config: EngineConfig,
        rank: int = 0,
        broadcaster: Broadcaster | None = None,
        tp_store: torch.distributed.Store | None = None,
    ):
        """`config` resolved; `tp_store`: the rendezvous store of the tensor-parallel group, if any."""
        self.config, self.rank = config, rank
        self.broadcaster = broadcaster or SingleRank()
        self.device = f"cuda:{rank}" if config.device == "cuda" else config.device
        if self.device.startswith("cuda"):
            torch.cuda.set_device(self.device)
        if config.parallel.tensor_parallel_size > 1:
            init_tensor_parallel(tp_store, rank, config.parallel.tensor_parallel_size, self.device)
        self.dtype = DTYPES[config.model.dtype]
        self.kv_dtype = kv_cache_dtype(config.cache.dtype, self.dtype)
        self.backend = BACKENDS[config.attention.backend](
            config.cache.block_size, config.scheduler.max_model_len, config.attention.cascade
        )
        self.timings = {"load_s": 0.0, "compile_s": 0.0, "capture_s": 0.0}
        self.graph_plan = GraphPlan.of(config, type(self.backend))
        self.compiled_model: CompiledModel | None = None  # set by _compile
        self.graph_runner: GraphRunner | None = None
        self.trust_decode_guards = False
        self.cuda_graph_pool_bytes: int | None = None  # device memory the CUDA-graph capture reserved
        start = time.perf_counter()
        logger.info("Loading %s weights", "random" if config.model.path is None else config.model.path)
        self.model = self._build_model()
        self.timings["load_s"] = time.perf_counter() - start
        self.weight_bytes = sum(t.numel() * t.element_size() for t in self.model.state_dict().values())
        self.num_blocks = self._allocate_kv_cache()
        # each running sequence's newest token, which the next decode step takes (see StepInputs)
        rows = token_table_rows(config.scheduler.max_num_seqs)
        self.token_table = torch.zeros(rows, dtype=torch.int64, device=self.device)
        if config.compile.enabled:
            self._compile()
        if config.compile.prefill_warm_up == "on":
            self.warm_up_prefill()
        self.sampler = self._make_sampler() if rank == 0 else None

    # ---- construction -------------------------------------------------------------------------------
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
            tensors = checkpoint_tensors(model_config.path, self.device)
        else:
            tensors = random_tensors(model_config, self.config.seed, self.device)
        load_weights(model, tensors, hf_parameter_shapes(model_config))
        for layer in self._attention_layers(model):
            layer.backend = self.backend.name
        if self.device.startswith("cuda"):
            from nvllm.ops import e4m3_to_bf16  # Triton: CUDA only

            # read by the Triton matmuls as they launch: a process's engine sets it, as every rank's does
            e4m3_to_bf16.ENABLED = model_config.fp8_move_bits
        return model.eval()

    @staticmethod
    def _attention_layers(model: torch.nn.Module) -> list[Attention]:
        return [m for m in model.modules() if isinstance(m, Attention)]

    def _allocate_kv_cache(self) -> int:
        cache, block_size = self.config.cache, self.config.cache.block_size
        useful = self.config.scheduler.max_num_seqs * self.backend.max_blocks_per_seq  # more is never used
        if cache.num_blocks is not None:
            num_blocks = cache.num_blocks
        elif self.device.startswith("cuda"):
            num_blocks = min(self._blocks_fitting_gpu_memory(), useful)
        else:
            num_blocks = min(
                cpu_kv_budget_bytes(self.config) // kv_bytes_per_block(self.config, self.dtype), useful
            )
        num_blocks = min_over_ranks(num_blocks, self.device)
        if num_blocks < 1:
            utilization = cache.gpu_memory_utilization
            raise ValueError(f"no memory left for the KV cache (cache.gpu_memory_utilization={utilization})")
        # one tensor per layer and per K/V, not views of one big tensor: compiled graphs then see
        # independent inputs that they mutate in place, with no aliasing between them to untangle
        for layer in self._attention_layers(self.model):
            shape = (num_blocks, block_size, layer.num_kv_heads, layer.head_dim)
            layer.k_cache = torch.zeros(shape, dtype=self.kv_dtype, device=self.device)
            layer.v_cache = torch.zeros(shape, dtype=self.kv_dtype, device=self.device)
            for kv_cache in (layer.k_cache, layer.v_cache):
                torch._dynamo.mark_static_address(kv_cache, guard=False)
        return num_blocks

    def _blocks_fitting_gpu_memory(self) -> int:
        """Blocks that fit in `gpu_memory_utilization` of the GPU once the weights and the activations of a
        full-budget prefill (measured by running one) are accounted for."""
        layers = self._attention_layers(self.model)
        scratch = torch.zeros(
            1, self.config.cache.block_size, layers[0].num_kv_heads, layers[0].head_dim, dtype=self.kv_dtype
        )
        for layer in layers:
            layer.k_cache = layer.v_cache = scratch.to(self.device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        self.forward(self._dummy_prefill(self.config.scheduler.max_num_batched_tokens))
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
        total = torch.cuda.get_device_properties(self.device).total_memory
        free_now, _ = torch.cuda.mem_get_info()
        used_by_others = total - free_now - torch.cuda.memory_reserved()
        budget = total * self.config.cache.gpu_memory_utilization - used_by_others - peak
        return int(budget // kv_bytes_per_block(self.config, self.dtype))

    def _compile(self) -> None:
        """Compile the model (traced at a decode batch first, so that inductor tunes its kernels for decode,
        whose speed matters most), then record its CUDA graphs."""
        start = time.perf_counter()
        logger.info("Compiling the model (a first start takes minutes; later ones reuse its cache)")
        load_cache_artifacts(self.config.compile.cache_artifacts)
        self.compiled_model = CompiledModel(self.model)
        self.forward(dummy_step(self.backend, 2, 2))
        if self.backend.cascade != "off":  # decode by cascade attention is a graph of its own
            self.forward(dummy_step(self.backend, 2, 2, cascade=True))
        if self.config.compile.compile_prefill:
            self.forward(dummy_step(self.backend, 2 * self.config.cache.block_size, 2))
        self.timings["compile_s"] = time.perf_counter() - start
        start = time.perf_counter()
        plan = self.graph_plan
        if plan.has_graphs:
            logger.info("Capturing CUDA graphs")
            torch.cuda.synchronize(self.device)
            torch.cuda.empty_cache()  # capturing empties the allocator's cache: measure from an empty one
            reserved_before = torch.cuda.memory_reserved(self.device)
            self.graph_runner = GraphRunner(
                self.compiled_model,
                self.backend,
                plan,
                self.device,
                self.token_table,
                self._attention_layers(self.model)[0].num_kv_heads,
            )
            self.cuda_graph_pool_bytes = torch.cuda.memory_reserved(self.device) - reserved_before
        self.timings["capture_s"] = time.perf_counter() - start
        self.trust_decode_guards = True  # every decode shape has run (see CompiledModel)

    @torch.no_grad()
    def warm_up_prefill(self) -> None:
        """Run a prefill step of each of `prefill_warm_up_tokens` through the model as a prefill the graphs
        do not hold runs (see `nvllm.runner.prefill_warm_up`): its time counts as compile time. The steps
        write no KV (`_dummy_prefill`), so the cache's contents stay as they were; every rank runs the same
        steps."""
        start = time.perf_counter()
        for tokens in prefill_warm_up_tokens(self.config.scheduler.max_num_batched_tokens):
            self._run_model(self._dummy_prefill(tokens))
        if self.device.startswith("cuda"):
            torch.cuda.synchronize(self.device)
        self.timings["compile_s"] += time.perf_counter() - start

    def _dummy_prefill(self, num_tokens: int) -> StepInputs:
        """A prefill step of `num_tokens` tokens that writes no KV, in sequences of at most a block each, so
        that each attends within block 0 alone: the memory profile runs one over a cache of a single block."""
        return dummy_step(self.backend, num_tokens, blocks_for(num_tokens, self.config.cache.block_size))

    def _make_sampler(self) -> Sampler:
        """The sampler, its graphs (where `compile.sampler` says) or its race kernels (`compile.race_kernel`,
        on CUDA) compiled now rather than on a first batch: their time counts as compile time."""
        race_kernel = self.config.compile.race_kernel and self.device.startswith("cuda")
        sampler = Sampler(compiled=self.config.compile.sampler == "on", race_kernel=race_kernel)
        if sampler.compiled or sampler.race_kernel:
            start = time.perf_counter()
            sampler.warm_up(self.config.model.vocab_size, self.dtype, self.device)
            self.timings["compile_s"] = self.timings.get("compile_s", 0.0) + time.perf_counter() - start
        return sampler

    # ---- steps --------------------------------------------------------------------------------------
    # no_grad, not inference_mode: tensors made under inference mode carry other dispatch keys, and the
    # compiled graphs (which guard on them) see inputs made both inside and outside this call
    @torch.no_grad()
    def forward(self, inputs: StepInputs) -> torch.Tensor:
        """One step's logits (this rank's share of the work; every rank gets the full logits): replayed from
        a CUDA graph when one holds the step, else the compiled model, else the eager one. A decode step's
        input ids are read from the token table."""
        if self.graph_runner is not None and self.graph_runner.can_replay(inputs):
            return self.graph_runner.replay(inputs)
        return self._run_model(inputs)

    def _run_model(self, inputs: StepInputs) -> torch.Tensor:
        """`forward` without the CUDA graphs: the compiled model, else the eager one."""
        if inputs.input_ids is None:
            input_ids = self.token_table[to_device(inputs.token_rows, self.device)]
            inputs = dataclasses.replace(inputs, input_ids=input_ids)
        logits_indices = inputs.logits_indices
        if inputs.prompt_logits_indices is not None:
            logits_indices = torch.cat([logits_indices, inputs.prompt_logits_indices])
        args = (
            to_device(inputs.input_ids, self.device),
            to_device(inputs.positions, self.device),
            self.backend.metadata(inputs, self.device),
            to_device(logits_indices, self.device),
        )
        if self.compiled_model is None:
            return self.model(*args)
        if inputs.is_prefill and not self.config.compile.compile_prefill:
            return self.compiled_model.eager(*args)
        trusted = self.trust_decode_guards and not inputs.is_prefill
        return self.compiled_model(*args, check_guards=not trusted)

    def execute(
        self,
        steps: list[StepInputs] | None,
        sampling: SamplingBatch | None = None,
        wrap_sample: Callable[[Sample], Sample] | None = None,
    ) -> torch.Tensor:
        """Run every step of a batch (rank 0 passes them, the other ranks get them from the broadcaster) and
        return the tokens sampled at each, `[logits rows, steps]`, on the device; nothing here waits for
        the device. Every rank runs this: rank 0 samples with `sampling` (through `wrap_sample`, if given)
        and records the prompt log-probabilities it asks for, the others pass None and receive its tokens,
        and each rank writes them into its token table for the steps that follow."""
        sample = None
        if sampling is not None:
            sample = self._sample_with(sampling)
            if wrap_sample is not None:
                sample = wrap_sample(sample)
        steps = self.broadcaster.steps(steps)
        if steps[0].block_copies is not None:
            self.copy_blocks(steps[0].block_copies)
        if not steps[0].is_prefill:
            steps = to_device_round(steps, self.device)
        tokens = []
        for index, inputs in enumerate(steps):
            logits = self.forward(inputs)
            if inputs.prompt_logits_indices is not None:
                logits, prompt_logits = logits[: inputs.num_logits], logits[inputs.num_logits :]
                if sampling is not None:
                    sampling.step_prompt_logprobs.record(prompt_logits)
            if sample is not None:
                sampled = sample(logits, index)
            else:
                sampled = torch.empty(inputs.num_logits, dtype=torch.int64, device=self.device)
            sampled = self.broadcaster.tokens(sampled)
            self.token_table.index_copy_(0, to_device(inputs.sampled_rows, self.device), sampled)
            tokens.append(sampled)
        if sampling is not None and sampling.grammar_masks is not None:
            # each step's matchers consume its tokens in the next step's sampling, once that step's forward
            # is launched; the last step's are consumed here, before the scheduler reads the matchers
            sampling.grammar_masks.settle()
        return torch.stack(tokens, dim=1)

    def _sample_with(self, sampling: SamplingBatch) -> Sample:
        return lambda logits, step: self.sampler.sample(logits, sampling, step)

    def copy_blocks(self, copies: torch.Tensor) -> None:
        """Copy KV blocks in every layer, `copies` rows of (source, destination): a fork's own copy of the
        block its prompt ends in, before the fork writes its tokens there."""
        copies = to_device(copies, self.device)
        for layer in self._attention_layers(self.model):
            for cache in (layer.k_cache, layer.v_cache):
                cache = cache.view(torch.uint8)  # the blocks' bytes: index_copy_ has no float8 kernel on CPU
                cache.index_copy_(0, copies[:, 1], cache.index_select(0, copies[:, 0]))

    @staticmethod
    def wait_for_device(event: torch.cuda.Event) -> None:
        event.synchronize()

    def shutdown(self, abort: bool = False) -> None:
        """Release the model, its graphs and KV cache, and leave the tensor-parallel group. `abort`: a peer
        rank is gone or out of step, so this rank's queued collectives would never end; nothing here
        waits for the device before the group is aborted (which ends them)."""
        if self.graph_runner is not None:
            self.graph_runner.release()  # before the group goes: NCCL waits for them
        for layer in self._attention_layers(self.model):
            layer.k_cache = layer.v_cache = torch.empty(0)
        if self.compiled_model is not None:
            self.compiled_model.release()
        self.model = self.compiled_model = self.graph_runner = None
        if self.config.parallel.tensor_parallel_size > 1:
            destroy_tensor_parallel(abort)
        if self.device.startswith("cuda"):
            # cuBLAS keeps a workspace per stream it ran on, the CUDA-graph capture stream included: released
            # here, so that an engine leaves memory where it found it
            clear_cublas_workspaces = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
            if clear_cublas_workspaces is not None:
                clear_cublas_workspaces()
            torch.cuda.empty_cache()
