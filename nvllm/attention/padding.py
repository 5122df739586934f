"""The padding rule: no size or bound the compiled model takes is ever below 2. Dynamo specialises a
dimension or int of 1 (a decode batch of one, one query per sequence, one prefix chunk), which would compile
the model again; padded, one graph serves prefill and decode of every size."""

MIN_SIZE = 2


def padded_size(size: int) -> int:
    return max(size, MIN_SIZE)
