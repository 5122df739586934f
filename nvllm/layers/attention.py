from __future__ import annotations

import torch
from torch import nn

import nvllm.ops  # noqa: F401  (registers torch.ops.nvllm.*)
from nvllm.attention.backend import AttentionMetadata
from nvllm.layers.cascade_attention import cascade_attention
from nvllm.layers.norm import RMSNorm
from nvllm.layers.rotary import RotaryEmbedding


class Attention(nn.Module):
    """Turns the qkv projection's rows into this layer's queries and new K/V, writing the K/V into its slice
    of the paged cache, then attends over the cache.

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

    def forward(
        self,
        qkv: torch.Tensor,
        positions: torch.Tensor,
        meta: AttentionMetadata,
        q_norm: RMSNorm | None,
        k_norm: RMSNorm | None,
        rotary_emb: RotaryEmbedding,
    ) -> torch.Tensor:
        """The attention output `[num_tokens, num_heads, head_dim]` of the packed rows `qkv` (queries, keys,
        values). One op, `nvllm::qk_norm_rope_store` (one kernel on CUDA), norms each query and key head
        (`q_norm`, `k_norm`; None for both in families without them) and rotates it (`rotary_emb`) as
        those modules would, and writes the keys and values into the cache; attention then reads only the
        queries and the cache."""
        normed = q_norm is not None
        assert not normed or q_norm.eps == k_norm.eps, "the op takes one eps for both norms"
        query = torch.ops.nvllm.qk_norm_rope_store(
            qkv,
            positions,
            rotary_emb.cos_sin,
            q_norm.weight if normed else None,
            k_norm.weight if normed else None,
            q_norm.eps if normed else 0.0,
            self.num_heads,
            self.num_kv_heads,
            self.k_cache,
            self.v_cache,
            meta.slot_mapping,
            self.backend,
        )
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
