"""Model-FLOPs utilization (MFU) and memory-bandwidth utilization (MBU), from the model's shapes.

The work of a step is counted from what the scheduler sent, not measured: FLOPs are those of the matmuls
(the linears of every layer, the LM head for each row of logits, and attention's QK^T and PV over each
token's context); bytes are the weights read once per model step (the embedding table only as the LM head
when it is tied) plus the K/V of each sequence's context read once per step and the K/V of its new tokens
written. A mixture-of-experts layer counts the FLOPs of the experts each token runs (its top-k) and the
bytes of the experts a step touches: with the tokens routed uniformly, a step of n tokens reads
E * (1 - (1 - k/E)^n) of a layer's E experts (k/E of them for one token, nearly all for a batch of hundreds).
Activations, norms, RoPE and padding rows are left out: MFU and MBU say how much of the device's
peak the model's own work takes. Peaks are the vendors' datasheet figures for dense bf16/fp16 tensor-core
math and HBM bandwidth; a device or dtype not in the table has none, and its utilization is None.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from nvllm.config import ModelConfig
from nvllm.models.qwen3_moe import is_sparse_layer
from nvllm.models.weights import parameter_bytes
from nvllm.runner.memory import kv_bytes_per_token

if TYPE_CHECKING:
    from nvllm.scheduler.scheduler import ScheduledBatch


@dataclass(frozen=True)
class DevicePeak:
    name: str
    tflops: float  # dense bf16/fp16 tensor-core TFLOP/s
    tb_per_s: float  # HBM bandwidth, TB/s (10^12 bytes/s)


# (substring of torch.cuda.get_device_name, peak), the most specific first. NVIDIA's datasheets give
# bf16 with sparsity; dense is half of it.
PEAKS: list[tuple[str, DevicePeak]] = [
    ("H200 NVL", DevicePeak("H200 NVL", 835.5, 4.8)),
    ("H200", DevicePeak("H200 SXM", 989.5, 4.8)),
    ("H100 NVL", DevicePeak("H100 NVL", 835.5, 3.9)),
    ("H100 PCIe", DevicePeak("H100 PCIe", 756.5, 2.0)),
    ("H100", DevicePeak("H100 SXM", 989.5, 3.35)),
    ("A100-SXM4-80GB", DevicePeak("A100 SXM 80GB", 312.0, 2.039)),
    ("A100 80GB PCIe", DevicePeak("A100 PCIe 80GB", 312.0, 1.935)),
    ("A100-SXM4-40GB", DevicePeak("A100 SXM 40GB", 312.0, 1.555)),
    ("A100-PCIE-40GB", DevicePeak("A100 PCIe 40GB", 312.0, 1.555)),
]
TENSOR_CORE_DTYPES = (torch.bfloat16, torch.float16)


def peak_of_name(device_name: str) -> DevicePeak | None:
    return next((peak for pattern, peak in PEAKS if pattern in device_name), None)


def device_peak(device: str, dtype: torch.dtype) -> DevicePeak | None:
    """The peak of `device` for math in `dtype`: None on the CPU, for fp32, and for GPUs not in the table."""
    if not device.startswith("cuda") or dtype not in TENSOR_CORE_DTYPES:
        return None
    return peak_of_name(torch.cuda.get_device_name(device))


def utilization(amount: float, seconds: float, peak_per_s: float | None) -> float | None:
    """`amount` of work done in `seconds` as a share of `peak_per_s` (None without a peak or a time)."""
    if peak_per_s is None or seconds <= 0:
        return None
    return amount / (seconds * peak_per_s)


@dataclass(frozen=True)
class ModelWork:
    """The per-unit costs of one model, from its shapes (the whole model: all tensor-parallel ranks)."""

    linear_flops_per_token: int  # the layers' q/k/v/o and gate/up/down projections (and routers, experts)
    lm_head_flops_per_row: int
    attention_flops_per_key: int  # QK^T and PV of one query token against one context token, all layers
    weight_bytes_per_step: int  # the weights every step reads: all but the experts
    kv_bytes_per_token: int
    expert_bytes: int = 0  # every expert of every sparse layer
    num_experts: int = 0
    experts_per_token: int = 0

    @classmethod
    def of(cls, model: ModelConfig, dtype: torch.dtype, kv_dtype: torch.dtype | None = None) -> ModelWork:
        """The costs of `model`'s weights in `dtype` and of its KV cache in `kv_dtype` (None: `dtype`)."""
        hidden, layers, head_dim = model.hidden_size, model.num_hidden_layers, model.head_dim
        q_size, kv_size = model.num_attention_heads * head_dim, model.num_key_value_heads * head_dim
        attention = hidden * (q_size + 2 * kv_size) + q_size * hidden
        dense_mlp = 3 * hidden * model.intermediate_size
        sparse_mlp = (
            hidden * model.num_experts + 3 * hidden * model.moe_intermediate_size * model.num_experts_per_tok
        )
        mlps = sum(sparse_mlp if is_sparse_layer(model, i) else dense_mlp for i in range(layers))
        sizes = parameter_bytes(model, dtype)
        read = [name for name in sizes if name != "model.embed_tokens.weight" or model.tie_word_embeddings]
        experts = [name for name in read if ".mlp.experts." in name]
        return cls(
            linear_flops_per_token=2 * (layers * attention + mlps),
            lm_head_flops_per_row=2 * hidden * model.vocab_size,
            attention_flops_per_key=4 * layers * q_size,
            weight_bytes_per_step=sum(sizes[name] for name in read) - sum(sizes[name] for name in experts),
            kv_bytes_per_token=kv_bytes_per_token(model, kv_dtype or dtype),
            expert_bytes=sum(sizes[name] for name in experts),
            num_experts=model.num_experts,
            experts_per_token=model.num_experts_per_tok,
        )

    def experts_read_share(self, tokens_per_step: float) -> float:
        """The expected share of a sparse layer's experts a step of `tokens_per_step` tokens reads, each token
        routed to `experts_per_token` of them uniformly: 1 - (1 - k/E)^n."""
        if not self.num_experts:
            return 0.0
        return 1 - (1 - self.experts_per_token / self.num_experts) ** tokens_per_step

    def flops(self, num_tokens: float, logits_rows: float, keys: float) -> float:
        """FLOPs of model steps over `num_tokens` tokens, `logits_rows` rows of logits and `keys` (query,
        context token) pairs of attention."""
        return (
            num_tokens * self.linear_flops_per_token
            + logits_rows * self.lm_head_flops_per_row
            + keys * self.attention_flops_per_key
        )

    def bytes(self, model_steps: float, num_tokens: float, keys_read: float) -> float:
        """Bytes of `model_steps` steps of `num_tokens` tokens together: the weights read once a step (of
        the experts, those its tokens touch), the K/V of `keys_read` context tokens read and of the new
        tokens written."""
        tokens_per_step = num_tokens / model_steps if model_steps else 0.0
        weights = self.weight_bytes_per_step + self.expert_bytes * self.experts_read_share(tokens_per_step)
        return model_steps * weights + (keys_read + num_tokens) * self.kv_bytes_per_token


def prefill_keys(computed: int, num_new: int) -> int:
    """Attention's (query, key) pairs of a chunk of `num_new` tokens after `computed` ones: token p attends
    to p + 1 keys, for p in computed..computed + num_new - 1."""
    return num_new * computed + num_new * (num_new + 1) // 2


def decode_keys(length: int, num_steps: int) -> int:
    """Attention's (query, key) pairs of `num_steps` decode steps from a newest token at position
    `length - 1`: step k attends to length + k keys."""
    return num_steps * length + num_steps * (num_steps - 1) // 2


@dataclass
class PhaseWork:
    flops: int = 0
    bytes: int = 0
    model_steps: int = 0


@dataclass
class WorkCounter:
    """FLOPs and bytes of every batch launched, per phase (prefill, decode)."""

    model: ModelWork
    phases: dict[str, PhaseWork] = field(
        default_factory=lambda: {"prefill": PhaseWork(), "decode": PhaseWork()}
    )

    def add(self, batch: ScheduledBatch) -> None:
        """Count `batch`, called as it is launched (its sequences' lengths are those it starts from)."""
        model = self.model
        num_tokens = keys = keys_read = 0
        if batch.is_prefill:
            for seq, n in zip(batch.seqs, batch.num_new_tokens):
                num_tokens += n
                keys += prefill_keys(seq.computed_len, n)
                keys_read += seq.computed_len + n
            rows, phase = len(batch.sampled_seqs), self.phases["prefill"]
        else:  # each step reads the keys it attends to
            for seq, n in zip(batch.seqs, batch.num_new_tokens):
                num_tokens += n
                keys += decode_keys(seq.device_len, n)
            keys_read, rows, phase = keys, num_tokens, self.phases["decode"]
        steps = batch.num_steps
        phase.flops += model.flops(num_tokens, rows, keys)
        phase.bytes += model.bytes(steps, num_tokens, keys_read)
        phase.model_steps += steps

    def stats(self) -> dict[str, int]:
        return {
            f"{name}_{key}": getattr(phase, key)
            for name, phase in self.phases.items()
            for key in ("flops", "bytes", "model_steps")
        }


def utilization_stats(stats: dict, peak: DevicePeak | None, num_devices: int) -> dict[str, float | None]:
    """MFU and MBU of each phase from an engine's `stats()` (or differences of two): its FLOPs and bytes
    over its seconds, against the peak of `num_devices` devices."""
    flops_per_s = peak.tflops * 1e12 * num_devices if peak else None
    bytes_per_s = peak.tb_per_s * 1e12 * num_devices if peak else None
    result = {}
    for phase in ("prefill", "decode"):
        seconds = stats[f"{phase}_s"]
        result[f"{phase}_mfu"] = utilization(stats[f"{phase}_flops"], seconds, flops_per_s)
        result[f"{phase}_mbu"] = utilization(stats[f"{phase}_bytes"], seconds, bytes_per_s)
    return result
