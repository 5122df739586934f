"""Custom ops (`nvllm::store_kvcache`, `nvllm::attention`) and the backends that implement them."""

from nvllm.ops.attention_ops import attention, available_backends, resolve_backend, store_kvcache

__all__ = ["attention", "store_kvcache", "available_backends", "resolve_backend"]
