"""Bad input fails with a TypeError (a wrong type) or a ValueError that names the problem, and leaves the
engine as it was: idle, every block free, and the next generate right."""

import threading

import numpy as np
import pytest
import torch

from nvllm import LLM, SamplingParams
from nvllm.engine.config_resolution import engine_config
from tests.helpers.engine_utils import TINY_VOCAB_SIZE, random_prompt, tiny_llm

pytestmark = pytest.mark.usefixtures("engine_left_idle")

MAX_MODEL_LEN = 32
NUM_BLOCKS = 7  # 28 tokens of KV: less than one max_model_len request, so the cache check can fire
GOOD_PROMPTS = [random_prompt(6, seed=300), random_prompt(3, seed=301)]
GREEDY = SamplingParams(temperature=0, max_tokens=4)


@pytest.fixture(scope="module")
def llm():
    with tiny_llm(kvcache_block_size=4, num_kvcache_blocks=NUM_BLOCKS, max_model_len=MAX_MODEL_LEN) as engine:
        yield engine


@pytest.fixture(scope="module")
def expected(llm):
    """What the good prompts give on the untouched engine."""
    return llm.generate(GOOD_PROMPTS, GREEDY, use_tqdm=False)


def assert_still_serves(llm, expected):
    manager = llm.block_manager
    assert not llm.scheduler.running and not llm.scheduler.waiting
    assert manager.num_free_blocks == manager.num_blocks
    assert all(block.ref_count == 0 for block in manager.blocks)
    assert llm.generate(GOOD_PROMPTS, GREEDY, use_tqdm=False) == expected


@pytest.mark.parametrize(
    "prompt, max_tokens, message, error",
    [
        (
            random_prompt(MAX_MODEL_LEN + 1, seed=302),
            4,
            "33 tokens leaves no room for output .*=32",
            ValueError,
        ),
        # prompt + output hold at most max_model_len tokens: a full-length prompt has no room for one more
        (random_prompt(MAX_MODEL_LEN, seed=305), 4, "32 tokens leaves no room for output .*=32", ValueError),
        (None, 4, "a prompt must be a string or a list of token ids, got NoneType", TypeError),
        ("abc\ud800", 4, "is not valid Unicode text", ValueError),
        ([5, True], 4, r"token ids must be integers, got \[True\]", TypeError),
        ("", 4, "empty prompt", ValueError),  # tokenizes to no tokens
        ([], 4, "empty prompt", ValueError),
        ([5, -1, 6], 4, r"token id\(s\) \[-1\] outside the vocabulary", ValueError),
        (
            [5, TINY_VOCAB_SIZE],
            4,
            rf"\[{TINY_VOCAB_SIZE}\] outside the vocabulary \[0, {TINY_VOCAB_SIZE}\)",
            ValueError,
        ),
        ([5, 6.0], 4, r"token ids must be integers, got \[6.0\]", TypeError),
        (torch.tensor([5, 6]), 4, r"token ids must be integers, got \[tensor\(5\), tensor\(6\)\]", TypeError),
        (b"abc", 4, "a prompt must be a string or a list of token ids, got bytes", TypeError),
        (iter([5, 6]), 4, "a prompt must be a string or a list of token ids, got list_iterator", TypeError),
        (
            np.array(5),
            4,
            "a prompt must be a string or a list of token ids, got ndarray with 0 dimensions",
            TypeError,
        ),
        (np.array([[5, 6]]), 4, "got ndarray with 2 dimensions", TypeError),
        (random_prompt(20, seed=303), 12, "needs 8 KV blocks but the cache has 7", ValueError),
        # an np.int32 that a prompt's length would overflow: max_tokens is held as a Python int
        (random_prompt(20, seed=303), np.int32(2**31 - 1), "up to 32 tokens needs 8 KV blocks", ValueError),
    ],
    ids=[
        "too-long",
        "max-model-len-long",
        "none-prompt",
        "lone-surrogate",
        "bool-id",
        "empty-text",
        "empty-ids",
        "negative-id",
        "id-past-vocab",
        "float-id",
        "tensor-ids",
        "bytes",
        "iterator",
        "0-d-array",
        "2-d-array",
        "more-kv-than-cache",
        "int32-max-tokens",
    ],
)
def test_bad_request_is_rejected_before_anything_runs(llm, expected, prompt, max_tokens, message, error):
    prefill_before = llm.num_prefill_tokens
    with pytest.raises(error, match=message):
        # the good prompt first: nothing may be queued or run until every request is checked
        llm.generate(
            [GOOD_PROMPTS[0], prompt], SamplingParams(temperature=0, max_tokens=max_tokens), use_tqdm=False
        )
    assert llm.num_prefill_tokens == prefill_before
    assert_still_serves(llm, expected)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(max_tokens=0), "max_tokens=0 must be an integer >= 1"),
        (dict(max_tokens=True), "max_tokens=True must be an integer >= 1"),
        (dict(temperature=-0.5), "temperature=-0.5 must be a finite number >= 0"),
        (dict(temperature=float("nan")), "temperature=nan must be a finite number >= 0"),
        (dict(temperature=float("inf")), "temperature=inf must be a finite number >= 0"),
        (dict(temperature=10**400), "temperature=10{400} must be a finite number >= 0"),  # past a float
        (dict(temperature="0.5"), "temperature='0.5' must be a finite number >= 0"),
        (dict(temperature=None), "temperature=None must be a finite number >= 0"),
        (dict(top_p=0.0), r"top_p=0.0 must be a number in \(0, 1\]"),
        (dict(top_p=1.5), r"top_p=1.5 must be a number in \(0, 1\]"),
        (dict(top_p=None), r"top_p=None must be a number in \(0, 1\]"),
        (dict(top_k=0), "top_k=0 must be -1"),
        (dict(top_k=2.5), r"top_k=2.5 must be -1 .* or an integer in \[1, 2147483647\]"),
        (dict(top_k=2**70), r"top_k=1180591620717411303424 must be -1"),
        (dict(ignore_eos="no"), "ignore_eos='no' must be True or False"),
        (dict(seed="x"), "seed='x' must be None or an integer"),
        (dict(seed=1.5), "seed=1.5 must be None or an integer"),
        (dict(seed=2**64), r"seed=18446744073709551616 must be None or an integer in \[0, 2\*\*64\)"),
        (dict(seed=-1), "seed=-1 must be None or an integer"),
    ],
)
def test_bad_sampling_params(llm, expected, kwargs, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(**kwargs)
    assert_still_serves(llm, expected)


def test_a_field_set_after_construction_is_checked_before_anything_is_queued(llm, expected):
    changed = SamplingParams(seed=1)
    changed.seed = "x"
    with pytest.raises(ValueError, match="seed='x'"):
        llm.generate(GOOD_PROMPTS, [GREEDY, changed], use_tqdm=False)
    assert_still_serves(llm, expected)


def test_numpy_integers_are_integers(llm, expected):
    assert llm.generate([np.array(p) for p in GOOD_PROMPTS], GREEDY, use_tqdm=False) == expected
    numpy_params = SamplingParams(top_k=np.int64(5), max_tokens=np.int32(4), seed=np.uint64(2**63))
    python_params = SamplingParams(top_k=5, max_tokens=4, seed=2**63)
    assert llm.generate(GOOD_PROMPTS, numpy_params, use_tqdm=False) == llm.generate(
        GOOD_PROMPTS, python_params, use_tqdm=False
    )
    numpy_params.seed, python_params.seed = np.int64(7), 7  # set after construction: checked when submitted
    assert llm.generate(GOOD_PROMPTS, numpy_params, use_tqdm=False) == llm.generate(
        GOOD_PROMPTS, python_params, use_tqdm=False
    )
    assert_still_serves(llm, expected)


def test_prompts_as_a_generator_or_a_2d_array(llm, expected):
    assert llm.generate((p for p in GOOD_PROMPTS), GREEDY, use_tqdm=False) == expected
    equal_length = [GOOD_PROMPTS[0][:3], GOOD_PROMPTS[1]]
    assert llm.generate(np.array(equal_length), GREEDY, use_tqdm=False) == llm.generate(
        equal_length, GREEDY, use_tqdm=False
    )


@pytest.mark.parametrize("temperature", [1e-45, 1e-38, 1e-30])
def test_a_tiny_temperature_is_greedy(llm, expected, temperature):
    for top_k in (-1, 5):
        tiny = SamplingParams(temperature=temperature, top_k=top_k, max_tokens=4)
        sampled = SamplingParams(
            temperature=0.8, seed=7, max_tokens=4
        )  # the batch samples: no argmax shortcut
        outputs = llm.generate(GOOD_PROMPTS + [GOOD_PROMPTS[0]], [tiny, tiny, sampled], use_tqdm=False)
        assert outputs[:2] == expected


def test_threads_sharing_an_engine_each_get_their_own_outputs(llm, expected):
    prompts = [random_prompt(5 + i, seed=320 + i) for i in range(4)]
    serial = llm.generate(prompts, GREEDY, use_tqdm=False)
    results = {}

    def generate(name, batch):
        results[name] = llm.generate(batch, GREEDY, use_tqdm=False)

    threads = [
        threading.Thread(target=generate, args=(i, prompts if i % 2 else GOOD_PROMPTS)) for i in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert results == {i: serial if i % 2 else expected for i in range(4)}
    assert_still_serves(llm, expected)


def test_prompts_and_sampling_params_of_different_lengths(llm, expected):
    with pytest.raises(ValueError, match="2 prompts but 3 sampling params"):
        llm.generate(GOOD_PROMPTS, [GREEDY] * 3, use_tqdm=False)
    with pytest.raises(TypeError, match="expected SamplingParams, got dict"):
        llm.generate(GOOD_PROMPTS, [GREEDY, {"temperature": 0}], use_tqdm=False)
    with pytest.raises(TypeError, match="expected SamplingParams or a list of them, got int"):
        llm.generate(GOOD_PROMPTS, 0, use_tqdm=False)
    with pytest.raises(TypeError, match="prompts must be a prompt or a list of them, got NoneType"):
        llm.generate(None, GREEDY, use_tqdm=False)
    assert_still_serves(llm, expected)


def test_error_inside_a_step_leaves_the_engine_usable(llm, expected, monkeypatch):
    execute = llm.model_runner.execute
    calls = []

    def fails_on_second_step(steps, *sampling):
        calls.append(steps)
        if len(calls) == 2:  # after a prefill: sequences running, blocks held and published
            raise RuntimeError("injected failure")
        return execute(steps, *sampling)

    monkeypatch.setattr(llm.model_runner, "execute", fails_on_second_step)
    with pytest.raises(RuntimeError, match="injected failure"):
        llm.generate(GOOD_PROMPTS + [random_prompt(9, seed=304)], GREEDY, use_tqdm=False)
    assert len(calls) == 2
    monkeypatch.undo()
    assert_still_serves(llm, expected)


# ---- engine construction --------------------------------------------------------------------------------
def test_block_size_the_backend_cannot_serve():
    with pytest.raises(ValueError, match="cache.block_size=16 cannot be served by the flash_attn backend"):
        LLM("tiny", attention_backend="flash_attn", kvcache_block_size=16)


@pytest.mark.parametrize(
    "model, overrides, message",
    [
        ("tiny", dict(max_num_seq=3), "unknown LLM argument 'max_num_seq'"),
        ("tiny", dict(nope__x=1), "unknown LLM argument 'nope__x'"),
        ("tinny", {}, r"unknown model 'tinny'.*'tiny'"),
        ("../config", {}, r"model='../config': no such checkpoint directory"),
        (3, {}, "model=3 must be a checkpoint directory, a preset name, a hub id or None"),
        ("tiny", dict(kvcache_block_size="16"), "cache.block_size='16' must be int, not str"),
        ("tiny", dict(kvcache_block_size=16.0), "cache.block_size=16.0 must be int, not float"),
        ("tiny", dict(num_kvcache_blocks=3.7), "cache.num_blocks=3.7 must be int or None, not float"),
        ("tiny", dict(tensor_parallel_size="2"), "parallel.tensor_parallel_size='2' must be int"),
        ("tiny", dict(max_model_len=None), "scheduler.max_model_len=None must be int, not NoneType"),
        ("tiny", dict(max_num_seqs=2.5), "scheduler.max_num_seqs=2.5 must be int, not float"),
        ("tiny", dict(enable_prefix_caching="false"), "cache.enable_prefix_caching='false' must be bool"),
        ("tiny", dict(enforce_eager="yes"), "enforce_eager='yes' must be bool, not str"),
        ("tiny", dict(max_num_seqs=True), "scheduler.max_num_seqs=True must be int, not bool"),
        ("tiny", dict(quantization="awq"), "model.quantization='awq' must be one of"),
    ],
)
def test_bad_engine_arguments_are_named_before_anything_is_built(model, overrides, message, monkeypatch):
    from nvllm.engine import llm_engine

    def never(*args):
        raise AssertionError("the engine was built")

    monkeypatch.setattr(llm_engine.LLMEngine, "__init__", never)
    with pytest.raises(ValueError, match=message):
        LLM(model, **overrides)


def test_numpy_integers_and_a_path_object_are_taken(tiny_checkpoint):
    assert engine_config("tiny", max_num_seqs=np.int64(3)).scheduler.max_num_seqs == 3
    assert engine_config(tiny_checkpoint, enforce_eager=True).model.path == str(tiny_checkpoint)


def test_unsupported_architecture():
    with pytest.raises(ValueError, match=r"unsupported architecture 'GemmaForCausalLM'.*Qwen3ForCausalLM"):
        tiny_llm(model__architecture="GemmaForCausalLM")
