from __future__ import annotations

import torch
from torch import nn

import nvllm.ops  # noqa: F401  (registers torch.ops.nvllm.*)
from nvllm.attention.backend import AttentionMetadata
from nvllm.layers.cascade_attention import cascade_attention


class Attention(nn.Module):
    """Writes this layer's new K/V into its slice of the paged cache, then attends over the cache.

    The caches are set by the model runner once it has sized them. They are plain attributes, not buffers:
    torch.compile forces buffers' shapes static, and every other cache size (another memory budget or block
    size) would compile the model again; as attributes their sizes are symbolic. The runner marks them as
    static addresses, so that inductor's CUDA graphs use them in place instead of copying them.

    A decode step with a cascade plan (`meta.cascade`) attends by cascade: the plan's presence is part of
    the graph's structure (a second compiled graph and its own CUDA graphs), its contents are inputs.
    """

    def __init__(self, num_heads: int, num_kv_heads: int, head_dim: int, scale: float):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim, self.scale = (
            num_heads,
            num_kv_heads,
            head_dim,
            scale,
        )
        self.backend = "torch"
        self.k_cache = self.v_cache = torch.empty(0)

    def forward(self, query, key, value, meta: AttentionMetadata) -> torch.Tensor:
        torch.ops.nvllm.store_kvcache(key, value, self.k_cache, self.v_cache, meta.slot_mapping, self.backend)
        if meta.cascade is not None:
            return cascade_attention(query, self.k_cache, self.v_cache, meta, self.scale, self.backend)
        return torch.ops.nvllm.attention(
            query,
            self.k_cache,
            self.v_cache,
            meta.cu_seqlens_q,
            meta.seqlens_k,
            meta.block_tables,
            meta.max_seqlen_q,
            meta.max_seqlen_k,
            self.scale,
            self.backend,
        )
