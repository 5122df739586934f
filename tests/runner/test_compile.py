"""The model compiled region by region (fullgraph=True) through the custom ops, on the CPU, against eager."""

import pytest
import torch
import torch._dynamo.config
import torch._dynamo.utils
import torch.fx.experimental._config

from nvllm import LLM, SamplingParams

PROMPTS = [[9707, 11, 1879, 0], list(range(1000, 1023)), [5] * 40]


def torch_settings() -> dict:
    return {
        "dynamo": torch._dynamo.config.get_config_copy(),
        "fx": torch.fx.experimental._config.get_config_copy(),
    }


def test_compiled_model_matches_eager_without_graph_breaks_or_recompiles():
    params = SamplingParams(max_tokens=12, temperature=0, ignore_eos=True)
    # different lengths: decode batches shrink 3 → 2 → 1, a size dynamo would specialise without padding
    staggered = [SamplingParams(max_tokens=n, temperature=0, ignore_eos=True) for n in (12, 7, 3)]
    settings = dict(
        kvcache_block_size=16, num_kvcache_blocks=64, max_num_batched_tokens=32, max_model_len=128
    )
    with LLM("tiny", enforce_eager=True, **settings) as eager:
        expected = eager.generate(PROMPTS, staggered, use_tqdm=False)
        eager_runner = eager.model_runner

        torch._dynamo.reset()
        counters = torch._dynamo.utils.counters
        counters.clear()
        settings_before = torch_settings()
        with LLM("tiny", enforce_eager=False, compile__compile_prefill=True, **settings) as compiled:
            # the settings the engine compiles with hold only inside its calls: code around it sees torch's
            assert torch_settings() == settings_before
            # Three graphs, built at start-up: one decoder layer's, which all four layers run for prefill and
            # decode, the same layer's for decode by cascade attention (attention.cascade=auto), and the
            # final norm's. Compiled once each: once per layer would be more, and a restarted analysis would
            # trace a graph twice.
            frames_after_warmup = counters["stats"]["unique_graphs"]
            assert len(compiled.model_runner.model.model.layers) == 4
            assert frames_after_warmup == 3
            assert counters["aot_autograd"]["total"] == 3, "a region traced more than once"
            # the engine skips decode's guards once warmed up; evaluate them here, so that a batch shape
            # the padding failed to cover shows up as a recompile instead of running unchecked
            compiled.model_runner.trust_decode_guards = False
            outputs = compiled.generate(PROMPTS, staggered, use_tqdm=False)  # chunked prefill too
            assert [o["token_ids"] for o in outputs] == [o["token_ids"] for o in expected]
            assert counters["stats"]["unique_graphs"] == frames_after_warmup, "recompiled after warm-up"
            assert not counters["graph_break"], f"graph breaks: {dict(counters['graph_break'])}"
            assert torch_settings() == settings_before

            # logits of the same prefill batch, compiled vs eager
            for prompt in PROMPTS[:2]:
                compiled.add_request(prompt, params)
            batch = compiled.scheduler.schedule()
            batch_inputs = compiled.inputs.prefill(batch)
            compiled_logits = compiled.model_runner.forward(batch_inputs)
            compiled.abort_all()
        assert torch_settings() == settings_before  # and after it shut down
        eager_logits = eager_runner.forward(batch_inputs)
        torch.testing.assert_close(compiled_logits, eager_logits, atol=1e-4, rtol=1e-4)

        # Another KV cache size (memory budget, block size) reuses the compiled graphs: the caches' sizes
        # are symbolic, so nothing compiles again (and across processes the inductor cache hits). Here a
        # sequence fits one block, and block tables one column wide would be a shape of their own.
        other_cache = {**settings, "kvcache_block_size": 128, "num_kvcache_blocks": 24}
        with LLM("tiny", enforce_eager=False, compile__compile_prefill=True, **other_cache) as resized:
            assert resized.model_runner.model.model.layers[0].self_attn.attn.k_cache.shape[:2] == (24, 128)
            outputs = resized.generate(PROMPTS, staggered, use_tqdm=False)
            assert [o["token_ids"] for o in outputs] == [o["token_ids"] for o in expected]
            assert counters["stats"]["unique_graphs"] == frames_after_warmup, "recompiled for a cache size"

        # compile.compile_prefill=false: prefill runs the eager model (the regions compiled in place, skipped)
        with LLM("tiny", enforce_eager=False, compile__compile_prefill=False, **settings) as eager_prefill:
            outputs = eager_prefill.generate(PROMPTS, staggered, use_tqdm=False)
            assert [o["token_ids"] for o in outputs] == [o["token_ids"] for o in expected]


def test_cache_artifacts_make_a_start_with_empty_caches_warm(tmp_path, monkeypatch):
    """`compile.cache_artifacts`: the first engine writes the file; an engine with empty local inductor caches
    (and nothing compiled in the process) then takes every graph from it and compiles none."""
    artifacts = tmp_path / "artifacts.bin"
    settings = dict(
        enforce_eager=False,
        kvcache_block_size=16,
        num_kvcache_blocks=16,
        compile__cache_artifacts=str(artifacts),
    )
    counters = torch._dynamo.utils.counters
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "first"))
    torch._dynamo.reset()
    with LLM("tiny", **settings):
        assert artifacts.stat().st_size > 0
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "second"))
    torch._dynamo.reset()
    counters.clear()
    with LLM("tiny", **settings) as llm:
        outputs = llm.generate(PROMPTS, SamplingParams(max_tokens=3, temperature=0), use_tqdm=False)
    assert all(len(output["token_ids"]) == 3 for output in outputs)
    assert counters["inductor"]["fxgraph_cache_miss"] == 0, dict(counters["inductor"])
    # the decoder layer's graphs (plain, and by cascade attention) and the final norm's
    assert counters["inductor"]["fxgraph_cache_hit"] == 3, dict(counters["inductor"])


def test_unreadable_cache_artifacts_name_the_key(tmp_path):
    artifacts = tmp_path / "artifacts.bin"
    artifacts.write_bytes(b"not artifacts")
    with pytest.raises(ValueError, match="compile.cache_artifacts=.*artifacts.bin.*delete it"):
        LLM("tiny", enforce_eager=False, num_kvcache_blocks=16, compile__cache_artifacts=str(artifacts))


class ScaledLayer(torch.nn.Module):
    """A decoder layer's stand-in: its `forward` branches on a Python attribute, which dynamo guards on, so
    that each value is a graph of its own (as each model's shapes and family are)."""

    def __init__(self, power: int):
        super().__init__()
        self.power = power

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.power if self.power % 2 else x.abs() * self.power + 1


class ToyModel(torch.nn.Module):
    def __init__(self, power: int):
        super().__init__()
        self.layers = torch.nn.ModuleList([ScaledLayer(power), ScaledLayer(power)])

    def compile_regions(self) -> list[torch.nn.Module]:
        return list(self.layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers[1](self.layers[0](x))


def test_models_of_more_shapes_than_dynamos_default_limit_compile_in_one_process():
    """Every model's layers run one class's `forward`, whose compiled graphs dynamo counts against its
    recompile limit (8 by default): ten models one after another, as a sweep builds engines, each compile and
    compute what eager does; a model seen before reuses its graph."""
    from nvllm.runner.compiled_model import CompiledModel

    torch._dynamo.reset()
    counters = torch._dynamo.utils.counters
    counters.clear()
    x = torch.linspace(-2, 2, 8)
    for power in [*range(1, 11), 3]:
        model = ToyModel(power)
        compiled = CompiledModel(model)
        torch.testing.assert_close(compiled(x), compiled.eager(x))
        compiled.release()
    assert counters["stats"]["unique_graphs"] == 10
