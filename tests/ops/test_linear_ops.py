"""`nvllm::linear` and `nvllm::linear_silu_mul`: the skinny Triton matmul that small decode batches take
(plain, and with the SwiGLU activation in its epilogue), against an fp32
matmul; the layers take the ops only inside compiled graphs."""

import pytest
import torch
import torch.nn.functional as F

from nvllm.layers.linear import ColumnParallelLinear, GateUpSiluParallelLinear
from nvllm.ops import linear_ops
from nvllm.ops.linear_ops import SKINNY_MAX_ROWS, linear, linear_silu_mul, uses_skinny_matmul
from tests.helpers.triton_interpreter import run_in_interpreter

# Qwen3-0.6B's and -8B's layer matmuls and LM head (out, in), and an odd shape that needs every mask
SHAPES = [(4096, 1024), (1024, 2048), (6144, 1024), (1024, 3072), (151936, 1024), (6144, 4096), (1000, 200)]


def test_cpu_batches_take_f_linear():
    x = torch.zeros(4, 8)
    assert not uses_skinny_matmul(x)  # on the CPU
    torch.testing.assert_close(linear(x + 1, torch.ones(3, 8)), torch.full((4, 3), 8.0))


def test_compiled_layers_call_the_op_and_eager_layers_call_f_linear(monkeypatch):
    layer = ColumnParallelLinear(8, 3)
    layer.weight.data.fill_(1.0)
    x = torch.ones(4, 8)
    ops_in_graph = []

    def record_ops(graph_module, example_inputs):
        ops_in_graph.extend(node.target for node in graph_module.graph.nodes if node.op == "call_function")
        return graph_module.forward

    compiled = torch.compile(layer, backend=record_ops, fullgraph=True)
    torch.testing.assert_close(compiled(x), torch.full((4, 3), 8.0))
    assert torch.ops.nvllm.linear.default in ops_in_graph

    def no_op_in_eager(*args):
        raise AssertionError("an eager layer went through nvllm::linear")

    monkeypatch.setattr(linear_ops, "linear", no_op_in_eager)
    torch.testing.assert_close(layer(x), torch.full((4, 3), 8.0))


@pytest.mark.gpu
@pytest.mark.parametrize("out_features, in_features", SHAPES)
def test_skinny_matmul_matches_a_float32_matmul(out_features, in_features):
    torch.manual_seed(0)
    weight = torch.randn(out_features, in_features, device="cuda", dtype=torch.bfloat16) / in_features**0.5
    for num_rows in (1, 2, 5, 16, SKINNY_MAX_ROWS + 1):
        x = torch.randn(num_rows, in_features, device="cuda", dtype=torch.bfloat16)
        expected = F.linear(x.float(), weight.float())
        assert uses_skinny_matmul(x) == (num_rows <= SKINNY_MAX_ROWS)
        got = linear(x, weight)
        assert got.dtype == torch.bfloat16 and got.shape == expected.shape
        # bf16 output rounding (~0.4 % of a value of std 1), accumulation in fp32
        torch.testing.assert_close(got.float(), expected, atol=2e-2, rtol=1e-2)
    strided = torch.randn(3, 2 * in_features, device="cuda", dtype=torch.bfloat16)[
        :, ::2
    ]  # rows not contiguous
    torch.testing.assert_close(
        linear(strided, weight).float(), F.linear(strided.float(), weight.float()), atol=2e-2, rtol=1e-2
    )


def silu_mul_reference(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    gate, up = F.linear(x.double(), weight.double()).chunk(2, -1)
    return F.silu(gate) * up


def test_linear_silu_mul_on_the_cpu_is_the_matmul_then_the_activation():
    torch.manual_seed(0)
    x, weight = torch.randn(5, 24), torch.randn(2 * 7, 24)
    got = linear_silu_mul(x, weight)
    assert got.shape == (5, 7)
    torch.testing.assert_close(got, silu_mul_reference(x, weight).float())
    # bf16: the matmul rounded, then the activation in fp32 until the product and rounded once (as inductor's
    # fused kernel computes it)
    half_x, half_weight = x.bfloat16(), weight.bfloat16()
    gate, up = F.linear(half_x, half_weight).float().chunk(2, -1)
    once = (F.silu(gate) * up).bfloat16()
    torch.testing.assert_close(linear_silu_mul(half_x, half_weight), once, atol=0, rtol=0)


def test_compiled_mlp_projection_calls_the_gated_op_and_eager_the_matmul_then_the_activation(monkeypatch):
    layer = GateUpSiluParallelLinear(8, 3)
    layer.weight.data.normal_()
    x = torch.randn(6, 8)
    ops_in_graph = []

    def record_ops(graph_module, example_inputs):
        ops_in_graph.extend(node.target for node in graph_module.graph.nodes if node.op == "call_function")
        return graph_module.forward

    expected = silu_mul_reference(x, layer.weight).float()
    torch.testing.assert_close(torch.compile(layer, backend=record_ops, fullgraph=True)(x), expected)
    assert torch.ops.nvllm.linear_silu_mul.default in ops_in_graph

    def no_op_in_eager(*args):
        raise AssertionError("an eager layer went through nvllm::linear_silu_mul")

    monkeypatch.setattr(linear_ops, "linear_silu_mul", no_op_in_eager)
    torch.testing.assert_close(layer(x), expected)


def test_fp8_weights_take_their_own_table_where_it_holds_their_shape(monkeypatch):
    """A shape `FP8_CONFIGS` holds: fp8 weights (a byte an element) take its configuration, bf16 ones and the
    gated kernel the bf16 tables'; a shape it does not hold: the bf16 tables' for both."""
    from nvllm.ops import skinny_matmul

    assert (6144, 4096) not in skinny_matmul.FP8_CONFIGS
    monkeypatch.setitem(skinny_matmul.FP8_CONFIGS, (4096, 4096), (64, 1024, 8, 3))
    weight = torch.zeros(4096, 4096, dtype=torch.float8_e4m3fn)
    x = torch.zeros(1, 4096, dtype=torch.bfloat16)
    monkeypatch.setattr(linear_ops, "uses_skinny_matmul", lambda x: True)
    assert linear_ops.chosen_skinny_config(x, weight) == (64, 1024, 8, 3)
    bf16 = skinny_matmul.CONFIGS[(4096, 4096)]
    assert linear_ops.chosen_skinny_config(x, weight.to(torch.bfloat16)) == bf16
    assert skinny_matmul.skinny_config(4096, 4096, gated=True, weight_bytes=1) == skinny_matmul.DEFAULT_CONFIG
    assert skinny_matmul.skinny_config(6144, 4096, weight_bytes=1) == skinny_matmul.CONFIGS[(6144, 4096)]


def test_a_reduction_split_over_programs_adds_their_partials_in_split_order_in_the_interpreter():
    """`split_k` programs a strip, on sizes off every block (a last split shorter than the others, one with
    no slice at all); bf16's stand-in fp32 and fp8 weights: the fp32 matmul's result, the same bits from
    one call to the next, and the counters back at zero after each call. Without a `split_k`, the table's
    for the weight's shape and bytes an element."""
    run_in_interpreter(
        """
import torch
from nvllm.ops.fp8 import quantize_rows
from nvllm.ops.skinny_matmul import skinny_matmul
from nvllm.ops.split_reduction import tile_counters
generator = torch.Generator().manual_seed(0)
x = torch.randn(5, 300, generator=generator)
weight = torch.randn(70, 300, generator=generator) / 300**0.5
q, scale = quantize_rows(weight)
cases = [(weight, None, weight), (q, scale, q.float() * scale[:, None])]
for w, w_scale, dense in cases:
    expected = x @ dense.T
    # 300: five slices of 64, the last 44 wide; 3 splits: the last one shorter, 4: the last with none
    for split_k in (1, 2, 3, 4):
        got = skinny_matmul(x, w, (32, 64, 4, 2), weight_scale=w_scale, split_k=split_k)
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
        again = skinny_matmul(x, w, (32, 64, 4, 2), weight_scale=w_scale, split_k=split_k)
        assert torch.equal(got, again)
        assert not tile_counters(x.device).any()
# the table's split for a weight's shape and dtype, where the caller names none
from nvllm.ops import skinny_matmul as module
module.SPLIT_K[(70, 300, 4)] = 3
splits = []
class RecordingGrids:
    def __init__(self, kernel):
        self.kernel = kernel
    def __getitem__(self, grid):
        splits.append(grid[1])
        return self.kernel[grid]
module._skinny_matmul_kernel = RecordingGrids(module._skinny_matmul_kernel)
torch.testing.assert_close(skinny_matmul(x, weight, (32, 64, 4, 2)), x @ weight.T, atol=1e-5, rtol=1e-5)
skinny_matmul(x, q, (32, 64, 4, 2), weight_scale=scale)  # the same shape in fp8: not in the table
assert splits == [3, 1], splits
"""
    )


def test_a_few_rows_on_the_cuda_cores_are_the_matmul_in_the_interpreter():
    """`fma_matmul` at one and two rows, fp32 (bf16's stand-in) and fp8 weights, a reduction in several
    slices (the last one short) and in one: the fp32 matmul's result. `skinny_matmul` hands a shape
    `FMA_CONFIGS` holds to it at up to `FMA_MAX_ROWS` rows, and not with more rows, the gate or a split."""
    run_in_interpreter(
        """
import torch
from nvllm.ops import skinny_matmul as module
from nvllm.ops.fp8 import quantize_rows
generator = torch.Generator().manual_seed(0)
x = torch.randn(3, 300, generator=generator)
weight = torch.randn(70, 300, generator=generator) / 300**0.5
q, scale = quantize_rows(weight)
for w, w_scale, dense in [(weight, None, weight), (q, scale, q.float() * scale[:, None])]:
    for config in [(8, 64, 4, 1), (16, 512, 4, 1)]:
        for rows in (1, 2):
            got = module.fma_matmul(x[:rows], w, config, weight_scale=w_scale)
            torch.testing.assert_close(got, x[:rows] @ dense.T, atol=1e-5, rtol=1e-5)
calls = []
fma = module.fma_matmul
module.fma_matmul = lambda *args, **kwargs: calls.append(args[0].shape[0]) or fma(*args, **kwargs)
module.FMA_CONFIGS[(70, 300, 4)] = (8, 64, 4, 1)
for rows in (1, 2, 3):
    module.skinny_matmul(x[:rows], weight, (32, 64, 4, 2))
module.skinny_matmul(x[:1], weight, (32, 64, 4, 2), split_k=2)
module.skinny_matmul(x[:1], torch.cat([weight, weight]), (32, 64, 4, 2), gated=True)
assert calls == [1, 2], calls
"""
    )


@pytest.mark.gpu
def test_every_chosen_skinny_configuration_computes_the_matmul():
    """Each block configuration the tables pick, run directly (`linear` may leave a shape to cuBLAS), plain
    and with the activation."""
    from nvllm.ops.fp8 import quantize_rows
    from nvllm.ops.skinny_matmul import (
        CONFIGS,
        DEFAULT_CONFIG,
        FMA_CONFIGS,
        FP8_CONFIGS,
        GATED_CONFIGS,
        SPLIT_K,
        fma_matmul,
        skinny_config,
        skinny_matmul,
    )

    torch.manual_seed(0)
    weight = torch.randn(1000, 1560, device="cuda", dtype=torch.bfloat16) / 1560**0.5  # every mask in play
    x = torch.randn(SKINNY_MAX_ROWS, 1560, device="cuda", dtype=torch.bfloat16)
    chosen = {c for table in (CONFIGS, GATED_CONFIGS) for c in table.values() if c is not None}
    for config in chosen | {DEFAULT_CONFIG}:
        for num_rows in (1, 2, SKINNY_MAX_ROWS):
            expected = F.linear(x[:num_rows].float(), weight.float())
            gated = silu_mul_reference(x[:num_rows], weight).float()
            what = f"{config}, {num_rows} rows"
            got = skinny_matmul(x[:num_rows], weight, config).float()
            torch.testing.assert_close(got, expected, atol=2e-2, rtol=1e-2, msg=what)
            got = skinny_matmul(x[:num_rows], weight, config, gated=True).float()
            torch.testing.assert_close(got, gated, atol=2e-2, rtol=1e-2, msg=f"gated {what}")
    # fp8 weights' own configurations, on an fp8 weight (their slices can be too large for bf16's bytes)
    fp8_weight, scale = quantize_rows(weight)
    dequantized = fp8_weight.float() * scale[:, None]
    for config in set(FP8_CONFIGS.values()):
        for num_rows in (1, 2, SKINNY_MAX_ROWS):
            expected = F.linear(x[:num_rows].float(), dequantized)
            got = skinny_matmul(x[:num_rows], fp8_weight, config, weight_scale=scale).float()
            what = f"fp8 {config}, {num_rows} rows"
            torch.testing.assert_close(got, expected, atol=2e-2, rtol=1e-2, msg=what)
    # the CUDA cores' configurations, at one and two rows (fp8: the weight above; bf16: `weight`)
    for (_, _, weight_bytes), config in FMA_CONFIGS.items():
        w, w_scale = (fp8_weight, scale) if weight_bytes == 1 else (weight, None)
        for num_rows in (1, 2):
            expected = F.linear(x[:num_rows].float(), dequantized if weight_bytes == 1 else weight.float())
            got = fma_matmul(x[:num_rows], w, config, weight_scale=w_scale).float()
            what = f"on the CUDA cores {config}, {num_rows} rows"
            torch.testing.assert_close(got, expected, atol=2e-2, rtol=1e-2, msg=what)
    # each split the table names, at its shape's configuration (fp8: the weight above; bf16: `weight`)
    for (n, k, weight_bytes), split_k in SPLIT_K.items():
        config = skinny_config(n, k, weight_bytes=weight_bytes)
        w, w_scale = (fp8_weight, scale) if weight_bytes == 1 else (weight, None)
        for num_rows in (1, 2, SKINNY_MAX_ROWS):
            expected = F.linear(x[:num_rows].float(), dequantized if weight_bytes == 1 else weight.float())
            got = skinny_matmul(x[:num_rows], w, config, weight_scale=w_scale, split_k=split_k).float()
            what = f"{config} split {split_k}, {num_rows} rows"
            torch.testing.assert_close(got, expected, atol=2e-2, rtol=1e-2, msg=what)


@pytest.mark.gpu
@pytest.mark.parametrize("split_k", [2, 4, 8])
def test_a_split_reduction_on_the_gpu_is_the_matmul_and_replays_in_a_graph_to_the_bit(split_k):
    """Split programs on the GPU, where they run at once and the last to arrive is any of them: the fp32
    matmul's result, the same bits eager and in each replay of a CUDA graph of three launches back to back
    (each launch's last program leaves the counters at zero for the next), bf16 and fp8 weights."""
    from nvllm.ops.fp8 import quantize_rows
    from nvllm.ops.skinny_matmul import skinny_matmul
    from nvllm.ops.split_reduction import tile_counters

    torch.manual_seed(0)
    weight = torch.randn(2048, 4096, device="cuda", dtype=torch.bfloat16) / 64
    x = torch.randn(3, 4096, device="cuda", dtype=torch.bfloat16)
    q, scale = quantize_rows(weight)
    config = (32, 512, 4, 4)
    for w, w_scale, dense in ((weight, None, weight.float()), (q, scale, q.float() * scale[:, None])):
        eager = skinny_matmul(x, w, config, weight_scale=w_scale, split_k=split_k)
        expected = F.linear(x.float(), dense)
        torch.testing.assert_close(eager.float(), expected, atol=2e-2, rtol=1e-2)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outputs = [skinny_matmul(x, w, config, weight_scale=w_scale, split_k=split_k) for _ in range(3)]
        for _ in range(5):
            graph.replay()
            torch.cuda.synchronize()
            assert all(torch.equal(out, eager) for out in outputs)
        assert not tile_counters(x.device).any()


@pytest.mark.gpu
@pytest.mark.parametrize("intermediate, hidden", [(3072, 1024), (12288, 4096), (500, 520)])
def test_linear_silu_mul_matches_a_float32_reference(intermediate, hidden):
    """The skinny kernel with the activation in its epilogue (up to 16 rows), then cuBLAS and the activation
    kernel."""
    torch.manual_seed(0)
    weight = torch.randn(2 * intermediate, hidden, device="cuda", dtype=torch.bfloat16) / hidden**0.5
    for num_rows in (1, 2, 5, 16, SKINNY_MAX_ROWS + 1, 300):
        x = torch.randn(num_rows, hidden, device="cuda", dtype=torch.bfloat16)
        got = linear_silu_mul(x, weight)
        assert got.dtype == torch.bfloat16 and got.shape == (num_rows, intermediate)
        expected = silu_mul_reference(x, weight).float()
        torch.testing.assert_close(got.float(), expected, atol=2e-2, rtol=1e-2, msg=f"{num_rows} rows")
