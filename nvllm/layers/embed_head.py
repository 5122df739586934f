"""Vocabulary-parallel embedding and LM head: each rank owns a contiguous slice of the vocabulary."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from nvllm.distributed.group import all_reduce, tp_rank, tp_size
from nvllm.ops.linear_ops import linear


class VocabParallelEmbedding(nn.Module):
    def __init__(self, vocab_size: int, hidden_size: int):
        super().__init__()
        assert vocab_size % tp_size() == 0, (
            f"vocabulary of {vocab_size} does not split over {tp_size()} ranks"
        )
        self.vocab_size = vocab_size
        self.shard_size = vocab_size // tp_size()
        self.shard_start = tp_rank() * self.shard_size
        self.weight = nn.Parameter(torch.empty(self.shard_size, hidden_size), requires_grad=False)

    def weight_loader(self, param: nn.Parameter, full: torch.Tensor) -> None:
        param.data.copy_(full.narrow(0, self.shard_start, self.shard_size))

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        if tp_size() == 1:
            return F.embedding(input_ids, self.weight)
        # tokens outside this rank's slice look up row 0 and are zeroed; the all-reduce fills them in
        local_ids = input_ids - self.shard_start
        in_shard = (local_ids >= 0) & (local_ids < self.shard_size)
        embedded = F.embedding(local_ids * in_shard, self.weight) * in_shard.unsqueeze(-1)
        return all_reduce(embedded)


class ParallelLMHead(VocabParallelEmbedding):
    """Logits over the whole vocabulary; with TP, each rank computes its slice and all gather them."""

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        # the op (the skinny kernel for small batches) even though the LM head is outside the compiled
        # regions: it runs inside the CUDA graphs, where the op's dispatch costs nothing per replay
        logits = linear(hidden_states, self.weight)
        if tp_size() == 1:
            return logits
        shards = [torch.empty_like(logits) for _ in range(tp_size())]
        dist.all_gather(shards, logits)
        return torch.cat(shards, dim=-1)
