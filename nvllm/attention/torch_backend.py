"""The pure-PyTorch backend: runs on any device, any block size; the oracle in tests."""

from __future__ import annotations

from nvllm.attention.backend import AttentionBackend, GraphSupport


class TorchBackend(AttentionBackend):
    name = "torch"
    requirement = "nothing"
    graph_support = GraphSupport.NEVER  # reads sequence lengths on the host
