"""MFU and MBU against values worked out by hand from the tiny and Qwen3-0.6B shapes, and the engine's
count of the work of a run against the same arithmetic."""

import pytest
import torch

from nvllm import SamplingParams
from nvllm.models.presets import PRESETS
from nvllm.profiling.utilization import (
    DevicePeak,
    ModelWork,
    WorkCounter,
    decode_keys,
    device_peak,
    peak_of_name,
    prefill_keys,
    utilization_stats,
)
from nvllm.runner.memory import kv_bytes_per_token
from nvllm.scheduler.scheduler import ScheduledBatch
from nvllm.scheduler.sequence import Sequence
from tests.helpers.engine_utils import TINY_VOCAB_SIZE, random_prompt, tiny_llm

H200 = DevicePeak("H200 SXM", 989.5, 4.8)


def test_tiny_shape_by_hand():
    # hidden 128, intermediate 256, 4 layers, 8 heads and 4 KV heads of 32, vocabulary 151,936, untied
    # per layer: q/k/v 128 x (256 + 128 + 128) + o 256 x 128 + gate/up/down 3 x 128 x 256 = 196,608
    work = ModelWork.of(PRESETS["tiny"], torch.float32)
    assert work.linear_flops_per_token == 2 * 4 * 196_608 == 1_572_864
    assert work.lm_head_flops_per_row == 2 * 128 * 151_936 == 38_895_616
    assert work.attention_flops_per_key == 4 * 4 * 8 * 32 == 4_096  # QK^T and PV, 2 FLOPs a multiply-add
    # read: 4 layers of 196,608 + norms 2 x 128 + 2 x 32, the final norm, the LM head (not the embedding)
    assert work.weight_bytes_per_step == (4 * (196_608 + 320) + 128 + 151_936 * 128) * 4 == 80_942_592
    assert work.kv_bytes_per_token == 2 * 4 * 4 * 32 * 4 == 4_096


def test_fp8_weights_count_a_byte_an_element_and_a_scale_a_row():
    import dataclasses

    work = ModelWork.of(dataclasses.replace(PRESETS["tiny"], quantization="fp8"), torch.float32)
    # a layer: its matmuls' 196,608 elements a byte each, and a 4-byte scale for each of their rows (q 256,
    # k and v 128 each, o 128, gate and up 256 each, down 128); the norms, final norm and LM head in fp32
    rows = 256 + 128 + 128 + 128 + 256 + 256 + 128
    assert work.weight_bytes_per_step == 4 * (196_608 + 4 * rows + 320 * 4) + 128 * 4 + 151_936 * 128 * 4
    assert work.weight_bytes_per_step == 78_603_776
    assert work.linear_flops_per_token == 1_572_864  # the FLOPs are the model's whatever its storage


def test_qwen3_06b_shape_by_hand():
    # hidden 1024, intermediate 3072, 28 layers, 16 heads and 8 KV heads of 128, tied embeddings, bf16
    # per layer: 1024 x (2048 + 1024 + 1024) + 2048 x 1024 + 3 x 1024 x 3072 = 15,728,640
    work = ModelWork.of(PRESETS["qwen3-0.6b"], torch.bfloat16)
    assert work.linear_flops_per_token == 880_803_840
    assert work.lm_head_flops_per_row == 311_164_928
    assert work.attention_flops_per_key == 4 * 28 * 2048 == 229_376
    # every parameter is read (the tied embedding as the LM head): Qwen3-0.6B's 596,049,920 in bf16
    assert work.weight_bytes_per_step == 596_049_920 * 2 == 1_192_099_840
    assert work.kv_bytes_per_token == 2 * 28 * 8 * 128 * 2 == 114_688


def test_mfu_and_mbu_of_a_decode_round_on_the_h200():
    """256 sequences of 600 tokens, one 16-step round each: 4096 tokens, keys 256 x (16 x 600 + 0+1+..+15)."""
    counter = WorkCounter(ModelWork.of(PRESETS["qwen3-0.6b"], torch.bfloat16))
    batch = ScheduledBatch(is_prefill=False)
    for _ in range(256):
        batch.add(Sequence(list(range(600)), SamplingParams()), 16)
    counter.add(batch)
    keys = 256 * (16 * 600 + 120)
    flops = 4096 * (880_803_840 + 311_164_928) + keys * 229_376
    num_bytes = 16 * 1_192_099_840 + (keys + 4096) * 114_688
    assert flops == 5_453_064_962_048 and num_bytes == 304_923_803_648
    stats = {"prefill_s": 0.0, **counter.stats(), "decode_s": 0.02}
    assert (stats["decode_flops"], stats["decode_bytes"], stats["decode_model_steps"]) == (
        flops,
        num_bytes,
        16,
    )
    result = utilization_stats(stats, H200, num_devices=1)
    assert result["decode_mfu"] == pytest.approx(5_453_064_962_048 / (0.02 * 989.5e12))
    assert result["decode_mbu"] == pytest.approx(304_923_803_648 / (0.02 * 4.8e12))
    assert result["prefill_mfu"] is None and result["prefill_mbu"] is None  # no time spent in it
    two = utilization_stats(stats, H200, num_devices=2)
    assert two["decode_mfu"] == pytest.approx(result["decode_mfu"] / 2)
    assert utilization_stats(stats, None, 1)["decode_mbu"] is None  # no peak: none rather than a guess


def test_a_prefill_chunk_after_cached_tokens():
    """A 600-token prompt whose first 256 tokens are cached: its 344 others at positions 256..599."""
    counter = WorkCounter(ModelWork.of(PRESETS["qwen3-0.6b"], torch.bfloat16))
    seq = Sequence(list(range(600)), SamplingParams())
    seq.computed_len = 256
    batch = ScheduledBatch(is_prefill=True)
    batch.add(seq, 344)
    counter.add(batch)
    keys = 344 * 256 + 344 * 345 // 2  # token p attends to p + 1 keys
    assert keys == 147_404
    stats = counter.stats()
    assert stats["prefill_flops"] == 344 * 880_803_840 + 311_164_928 + keys * 229_376  # one row of logits
    assert stats["prefill_bytes"] == 1_192_099_840 + (600 + 344) * 114_688  # the context read, 344 written
    assert stats["decode_flops"] == stats["decode_bytes"] == 0


def test_peaks_come_from_the_table_and_unknown_devices_have_none():
    assert peak_of_name("NVIDIA H200") == H200
    assert peak_of_name("NVIDIA H100 80GB HBM3") == DevicePeak("H100 SXM", 989.5, 3.35)
    assert peak_of_name("NVIDIA H100 PCIe").tb_per_s == 2.0
    assert peak_of_name("NVIDIA A100-SXM4-80GB") == DevicePeak("A100 SXM 80GB", 312.0, 2.039)
    assert peak_of_name("NVIDIA A100-SXM4-40GB").tb_per_s == 1.555
    assert peak_of_name("NVIDIA GeForce RTX 4090") is None
    assert device_peak("cpu", torch.bfloat16) is None


def test_the_engine_counts_the_work_it_ran():
    """One request, a 10-token prompt and 5 tokens: a prefill step, then one round of 4 decode steps."""
    with tiny_llm() as llm:  # the tiny shape with a 4096-token vocabulary, fp32
        llm.generate(
            [random_prompt(10, seed=3)], SamplingParams(max_tokens=5, ignore_eos=True), use_tqdm=False
        )
        stats = llm.stats()
    lm_head, weights = 2 * 128 * TINY_VOCAB_SIZE, (4 * (196_608 + 320) + 128 + TINY_VOCAB_SIZE * 128) * 4
    # prefill: 10 tokens at positions 0..9 attend to 1..10 keys (55); one row of logits; 10 K/V written
    assert stats["prefill_flops"] == 10 * 1_572_864 + lm_head + 55 * 4_096
    assert stats["prefill_bytes"] == weights + (10 + 10) * 4_096
    # decode: tokens at positions 10..13 attend to 11..14 keys (50), each step reads them and writes one
    assert stats["decode_flops"] == 4 * (1_572_864 + lm_head) + 50 * 4_096
    assert stats["decode_bytes"] == 4 * weights + (50 + 4) * 4_096
    assert (stats["prefill_model_steps"], stats["decode_model_steps"]) == (1, 4)
    assert stats["decode_mfu"] is None and stats["decode_mbu"] is None  # a CPU has no peak


def test_attention_keys_of_a_prefill_chunk_and_of_decode_steps():
    # a chunk of 3 tokens after 4 computed ones: positions 4, 5, 6 attend to 5 + 6 + 7 keys
    assert prefill_keys(4, 3) == 18
    assert prefill_keys(0, 1) == 1
    # 3 steps from a newest token at position 9: 10 + 11 + 12 keys
    assert decode_keys(10, 3) == 33
    assert decode_keys(10, 1) == 10


def test_an_fp8_kv_cache_halves_the_kv_bytes_a_step_reads_and_leaves_the_weights_alone():
    model = PRESETS["qwen3-0.6b"]
    bf16, fp8 = ModelWork.of(model, torch.bfloat16), ModelWork.of(model, torch.bfloat16, torch.float8_e4m3fn)
    assert fp8.kv_bytes_per_token == 2 * 28 * 8 * 128 == bf16.kv_bytes_per_token // 2
    assert fp8.weight_bytes_per_step == bf16.weight_bytes_per_step
    assert fp8.bytes(1, 1, 1000) == bf16.weight_bytes_per_step + 1001 * 2 * 28 * 8 * 128


def test_kv_bytes_per_token_is_one_ranks_share_under_tensor_parallelism():
    model = PRESETS["qwen3-0.6b"]  # 28 layers, 8 KV heads of 128
    assert kv_bytes_per_token(model, torch.bfloat16) == 2 * 28 * 8 * 128 * 2
    assert kv_bytes_per_token(model, torch.bfloat16, tensor_parallel_size=2) == 2 * 28 * 4 * 128 * 2
