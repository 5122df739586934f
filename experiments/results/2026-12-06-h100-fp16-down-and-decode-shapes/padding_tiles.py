"""Counted on the CPU: the grouped matmuls' row tiles of a decode batch of B tokens padded to the next
multiple of 16 (the CUDA graphs' sizes), with the padding rows' pairs sent to the first token's experts
(`padding_follows_first`, as the engine does) against without them; uniform random router logits, 20 draws a
batch size. `python experiments/results/2026-12-06-h100-fp16-down-and-decode-shapes/padding_tiles.py`"""

import torch

from nvllm.ops.moe_routing import padding_follows_first, route
from nvllm.ops.moe_tiles import row_tile

EXPERTS, TOP_K, DRAWS = 128, 8, 20


def tiles(ids: torch.Tensor, block_m: int) -> int:
    """Row tiles of `block_m` pairs that the experts chosen in `ids` take."""
    counts = torch.bincount(ids.flatten(), minlength=EXPERTS)
    return int(((counts + block_m - 1) // block_m).sum())


def main() -> None:
    generator = torch.Generator().manual_seed(0)
    totals = [0.0, 0.0]
    for batch in range(17, 257, 7):
        padded = -(-batch // 16) * 16
        block_m = row_tile(padded * TOP_K, EXPERTS)
        without = with_padding = 0
        for _ in range(DRAWS):
            weights, ids = route(torch.randn(padded, EXPERTS, generator=generator), TOP_K, True)
            _, ids = padding_follows_first(weights, ids, torch.arange(padded) >= batch)
            without += tiles(ids[:batch], block_m) / DRAWS
            with_padding += tiles(ids, block_m) / DRAWS
        totals[0] += without
        totals[1] += with_padding
        grown = (with_padding / without - 1) * 100
        counts = f"{without:.2f} tiles, {with_padding:.2f} with padding (+{grown:.1f} %)"
        print(f"{batch} tokens padded to {padded}: {counts}")
    print(f"every batch size above: +{(totals[1] / totals[0] - 1) * 100:.2f} % tiles")


if __name__ == "__main__":
    main()
