"""Custom ops (`nvllm::qk_norm_rope_store`, `nvllm::attention` and cascade's two passes, `nvllm::linear`,
`nvllm::linear_silu_mul`, `nvllm::add_rms_norm`) and the kernels behind them."""

from nvllm.ops.attention_ops import attention, qk_norm_rope_store
from nvllm.ops.linear_ops import linear

__all__ = ["attention", "qk_norm_rope_store", "linear"]
