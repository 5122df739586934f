"""The noise a greedy parting is judged by, against hand-computed margins."""

import torch

from experiments.harness.parity import (
    margin_noise,
    nudged_embeddings,
    nudged_samples,
    precision_noise,
    sampled_margin_noise,
)


def test_opposite_shifts_move_a_margin_by_their_sum():
    fp32 = torch.tensor([2.0, 1.9, 0.0])
    ours = torch.tensor([1.95, 1.95, 0.0])  # the best down 0.05, the runner-up up 0.05
    assert abs(precision_noise(ours, fp32) - 0.05) < 1e-6
    assert abs(margin_noise(ours, fp32) - 0.10) < 1e-6


def test_a_shift_common_to_every_logit_moves_no_margin():
    fp32 = torch.tensor([[2.0, 1.0, -1.0], [0.0, 3.0, 1.0]])
    assert margin_noise(fp32 + 0.5, fp32) < 1e-6
    assert abs(margin_noise(fp32 + torch.tensor([[0.0, 0.0, 0.2], [0.0, 0.0, 0.0]]), fp32) - 0.2) < 1e-6


def test_sampled_margin_noise_is_the_median_of_the_samples_shifts():
    fp32 = torch.tensor([1.0, 0.0, -1.0])
    samples = [fp32 + torch.tensor([0.0, shift, 0.0]) for shift in (0.1, 0.3, 0.2)]
    assert abs(sampled_margin_noise(samples, fp32) - 0.2) < 1e-6


class EmbeddingOnly(torch.nn.Module):
    device = torch.device("cpu")

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(10, 64)

    def get_input_embeddings(self):
        return self.embed


def test_nudged_embeddings_move_each_element_by_under_a_bf16_step_and_seed_zero_not_at_all():
    model = EmbeddingOnly()
    tokens = torch.arange(10)
    plain = model.embed(tokens)

    def embedded(seed):
        handle = nudged_embeddings(model, seed)
        try:
            return model.embed(tokens)
        finally:
            handle.remove()

    assert torch.equal(embedded(0), plain)
    nudged = embedded(1)
    relative = (nudged - plain).abs() / plain.abs()
    assert 0 < relative.max() <= 2**-8 and (relative > 0).float().mean() > 0.9
    assert torch.equal(embedded(1), nudged) and not torch.equal(embedded(2), nudged)
    assert torch.equal(model.embed(tokens), plain)  # the hook is gone


def test_nudged_samples_draw_once_unmoved_then_nudged_and_leave_no_hook():
    model = EmbeddingOnly()
    tokens = torch.arange(10)
    plain = model.embed(tokens)
    drawn = nudged_samples(model, 3, lambda: [model.embed(tokens)])
    assert len(drawn) == 3 and torch.equal(drawn[0][0], plain)
    assert not torch.equal(drawn[1][0], plain) and not torch.equal(drawn[1][0], drawn[2][0])
    assert torch.equal(model.embed(tokens), plain)
