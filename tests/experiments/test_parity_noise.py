"""The noise a greedy parting is judged by, against hand-computed margins."""

import torch

from experiments.harness.parity import margin_noise, precision_noise


def test_opposite_shifts_move_a_margin_by_their_sum():
    fp32 = torch.tensor([2.0, 1.9, 0.0])
    ours = torch.tensor([1.95, 1.95, 0.0])  # the best down 0.05, the runner-up up 0.05
    assert abs(precision_noise(ours, fp32) - 0.05) < 1e-6
    assert abs(margin_noise(ours, fp32) - 0.10) < 1e-6


def test_a_shift_common_to_every_logit_moves_no_margin():
    fp32 = torch.tensor([[2.0, 1.0, -1.0], [0.0, 3.0, 1.0]])
    assert margin_noise(fp32 + 0.5, fp32) < 1e-6
    assert abs(margin_noise(fp32 + torch.tensor([[0.0, 0.0, 0.2], [0.0, 0.0, 0.0]]), fp32) - 0.2) < 1e-6
