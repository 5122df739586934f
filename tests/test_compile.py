"""The model compiled whole (fullgraph=True) through the custom ops, on the CPU, against eager."""

import torch
import torch._dynamo.testing

from nvllm import LLM, SamplingParams

PROMPTS = [[9707, 11, 1879, 0], list(range(1000, 1023)), [5] * 40]


def test_compiled_model_matches_eager_without_graph_breaks_or_recompiles():
    params = SamplingParams(max_tokens=12, temperature=0, ignore_eos=True)
    settings = dict(
        kvcache_block_size=16, num_kvcache_blocks=64, max_num_batched_tokens=32, max_model_len=128
    )
    with LLM("tiny", enforce_eager=True, **settings) as eager:
        expected = eager.generate(PROMPTS, params, use_tqdm=False)
        eager_runner = eager.model_runner
        batch_inputs = None

        torch._dynamo.reset()
        counters = torch._dynamo.utils.counters
        counters.clear()
        with LLM("tiny", enforce_eager=False, compile__compile_prefill=True, **settings) as compiled:
            frames_after_warmup = counters["stats"]["unique_graphs"]
            assert frames_after_warmup == 2  # one prefill graph, one decode graph, built at start-up
            outputs = compiled.generate(PROMPTS, params, use_tqdm=False)  # chunked prefill, decode of 3..1
            assert [o["token_ids"] for o in outputs] == [o["token_ids"] for o in expected]
            assert counters["stats"]["unique_graphs"] == frames_after_warmup, "recompiled after warm-up"
            assert not counters["graph_break"], f"graph breaks: {dict(counters['graph_break'])}"

            # logits of the same prefill batch, compiled vs eager
            seqs = [compiled.add_request(p, params) for p in PROMPTS[:2]]
            batch = compiled.scheduler.schedule()
            batch_inputs = compiled.model_runner.prepare(batch)
            compiled_logits = compiled.model_runner.execute(batch_inputs)
            compiled.abort_all()
            assert len(seqs) == 2
        eager_logits = eager_runner.execute(batch_inputs)
        torch.testing.assert_close(compiled_logits, eager_logits, atol=1e-4, rtol=1e-4)
