"""Qwen3-MoE: Qwen3's attention (q/k norms) with a mixture-of-experts MLP in the sparse layers
(`nvllm.layers.fused_moe`) and a dense gated MLP of `intermediate_size` in the others: those listed in
`mlp_only_layers` or off the `decoder_sparse_step`. Checkpoints store each expert's gate, up and down
projections as tensors of their own (`mlp.experts.{e}.gate_proj.weight`), which load into the stacked
expert weights, and the router as `mlp.gate.weight`."""

from __future__ import annotations

import re
from typing import Any

from torch import nn

from nvllm.config import ModelConfig
from nvllm.layers.fused_moe import FusedMoE
from nvllm.models.decoder import DecoderForCausalLM, GatedMLP
from nvllm.models.qwen3 import Qwen3ForCausalLM
from nvllm.models.sliding_window import qwen_window

EXPERT_TENSOR = re.compile(r"(.*\.mlp\.experts)\.(\d+)\.(gate|up|down)_proj\.weight")
# router and expert settings of other MoE families, which this one does not implement (refused when set)
OTHER_ROUTING = {
    "shared_expert_intermediate_size": 0,
    "n_shared_experts": 0,
    "num_shared_experts": 0,
    "routed_scaling_factor": 1.0,
    "n_group": 1,
    "topk_group": 1,
    "scoring_func": "softmax",
    "topk_method": "greedy",
}


def is_sparse_layer(config: ModelConfig, layer_index: int) -> bool:
    """Whether layer `layer_index` has experts (transformers' Qwen3-MoE rule)."""
    return (
        config.num_experts > 0
        and layer_index not in (config.mlp_only_layers or [])
        and (layer_index + 1) % config.decoder_sparse_step == 0
    )


class Qwen3MoeForCausalLM(Qwen3ForCausalLM):
    hf_defaults = {
        "max_position_embeddings": 32768,
        "head_dim": None,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "moe_intermediate_size": 768,
        "norm_topk_prob": False,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
    }
    hf_aliases = {"num_local_experts": "num_experts"}

    @staticmethod
    def make_mlp(config: ModelConfig, layer_index: int) -> nn.Module:
        if not is_sparse_layer(config, layer_index):
            return GatedMLP(config)
        return FusedMoE(
            config.hidden_size,
            config.num_experts,
            config.num_experts_per_tok,
            config.moe_intermediate_size,
            config.norm_topk_prob,
            routing_kernel=config.moe_routing_kernel,
            quantization=config.quantization,
            fp8_activations=config.fp8_activations,
        )

    @staticmethod
    def mlp_shapes(config: ModelConfig, layer_index: int) -> dict[str, tuple[int, ...]]:
        if not is_sparse_layer(config, layer_index):
            return DecoderForCausalLM.mlp_shapes(config, layer_index)
        hidden, intermediate = config.hidden_size, config.moe_intermediate_size
        shapes = {"gate.weight": (config.num_experts, hidden)}
        for e in range(config.num_experts):
            shapes[f"experts.{e}.gate_proj.weight"] = (intermediate, hidden)
            shapes[f"experts.{e}.up_proj.weight"] = (intermediate, hidden)
            shapes[f"experts.{e}.down_proj.weight"] = (hidden, intermediate)
        return shapes

    @staticmethod
    def unsupported_settings(hf: dict[str, Any]) -> list[str]:
        problems = qwen_window(hf)
        for key, neutral in OTHER_ROUTING.items():
            if hf.get(key) not in (None, neutral):
                problems.append(f"{key}={hf[key]!r} (Qwen3-MoE's router only: {key}={neutral!r})")
        experts, top_k = hf.get("num_experts", 128), hf.get("num_experts_per_tok", 8)
        if not 0 < top_k <= experts:
            problems.append(f"num_experts_per_tok={top_k} of num_experts={experts}")
        if hf.get("decoder_sparse_step", 1) < 1:
            problems.append(f"decoder_sparse_step={hf['decoder_sparse_step']} (at least 1)")
        return problems

    def expert_parameter(self, name: str) -> tuple[str, tuple[int, ...]] | None:
        """The stacked parameter and shard id (`ExpertWeights.weight_loader`'s) of a per-expert tensor."""
        match = EXPERT_TENSOR.fullmatch(name)
        if match is None:
            return None
        prefix, expert, projection = match.group(1), int(match.group(2)), match.group(3)
        if projection == "down":
            return f"{prefix}.down_proj", (expert,)
        return f"{prefix}.gate_up_proj", (expert, 0 if projection == "gate" else 1)

    def expert_shards(self) -> dict[str, list[tuple[int, ...]]]:
        """Every stacked expert parameter with the shard ids that must be loaded into it."""
        shards = {}
        for name, module in self.named_modules():
            if isinstance(module, FusedMoE):
                for param, ids in module.experts.shard_ids().items():
                    shards[f"{name}.experts.{param}"] = ids
        return shards
