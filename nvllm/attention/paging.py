"""How a sequence's tokens fill the paged KV cache: blocks of `block_size` tokens, the last one partly."""


def blocks_for(num_tokens: int, block_size: int) -> int:
    """Blocks that hold `num_tokens` tokens."""
    return -(-num_tokens // block_size)
