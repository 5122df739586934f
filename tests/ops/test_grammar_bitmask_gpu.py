"""The grammar bitmask kernel against the bits read one by one on the host: each constrained row keeps the
tokens whose bit is set and has -inf elsewhere; free rows are the logits in fp32.
`python -m pytest -m gpu tests/ops/test_grammar_bitmask_gpu.py`."""

import pytest
import torch

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("vocab", [151_936, 1000, 33])
def test_masked_logits_keep_exactly_the_tokens_whose_bit_is_set(vocab):
    from nvllm.ops.grammar_bitmask import masked_logits

    generator = torch.Generator().manual_seed(vocab)
    logits = torch.randn(5, vocab, generator=generator).to(torch.bfloat16)
    width = (vocab + 31) // 32
    words = torch.randint(-(2**31), 2**31, (3, width), generator=generator, dtype=torch.int64).to(torch.int32)
    mask_rows = torch.tensor([2, -1, 0, 1, -1], dtype=torch.int32)
    ours = masked_logits(logits.cuda(), words.cuda(), mask_rows.cuda()).cpu()

    tokens = torch.arange(vocab)
    expected = logits.float().clone()
    for row, mask_row in enumerate(mask_rows.tolist()):
        if mask_row >= 0:
            bits = (words[mask_row].long()[tokens // 32] >> (tokens % 32)) & 1
            expected[row][bits == 0] = float("-inf")
    assert torch.equal(ours, expected)
    assert (ours[0] == float("-inf")).any() and (ours[0] > float("-inf")).any()
