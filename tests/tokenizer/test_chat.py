"""`llm.chat`: conversations through the tokenizer's chat template, Qwen3's format."""

import pytest
from transformers import AutoTokenizer

from nvllm import LLM, SamplingParams

HELLO = [{"role": "user", "content": "Hello"}]
CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "<think>\nGreet back.\n</think>\n\nHello!"},
    {"role": "user", "content": "2+2?"},
]
# Qwen3's format, by hand: earlier assistant turns lose their reasoning; enable_thinking=False opens the
# assistant's turn with an empty reasoning block
EXPECTED = {
    True: "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
    "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n",
    False: "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
    "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"
    "<think>\n\n</think>\n\n",
}
GREEDY = SamplingParams(temperature=0, max_tokens=4)


@pytest.fixture(scope="module")
def llm(tiny_checkpoint):
    """The test checkpoint (Qwen3's vocabulary, its special tokens included), its tokenizer as saved."""
    with LLM(str(tiny_checkpoint), enforce_eager=True, kvcache_block_size=16, max_model_len=128) as engine:
        yield engine


@pytest.mark.parametrize("thinking", [True, False])
def test_chat_prompts_are_qwen3s_format_token_for_token(llm, thinking):
    outputs = llm.chat(
        [CONVERSATION, HELLO], GREEDY, use_tqdm=False, chat_template_kwargs={"enable_thinking": thinking}
    )
    tokenizer = AutoTokenizer.from_pretrained(llm.config.model.path)  # transformers' own reading of it
    expected = tokenizer.apply_chat_template(
        CONVERSATION, add_generation_prompt=True, tokenize=True, return_dict=False, enable_thinking=thinking
    )
    assert outputs[0].prompt_token_ids == expected
    assert tokenizer.decode(outputs[0].prompt_token_ids) == EXPECTED[thinking]
    assert outputs == llm.generate([expected, outputs[1].prompt_token_ids], GREEDY, use_tqdm=False)


@pytest.mark.parametrize(
    "messages, message",
    [
        ([], "messages must be"),
        ([{"role": "user"}], "content must be a string"),
        ([{"content": "hi"}], "'role' string"),
        ("hello", "messages must be"),
        ([[]], "non-empty list"),
    ],
)
def test_bad_conversations_are_refused(llm, messages, message):
    with pytest.raises(ValueError, match=message):
        llm.chat(messages, GREEDY, use_tqdm=False)
    assert llm.chat(HELLO, GREEDY, use_tqdm=False)[0]["token_ids"]


def test_a_tokenizer_without_template_is_a_clear_error(llm, monkeypatch):
    monkeypatch.setattr(llm.tokenizer, "chat_template", None)
    with pytest.raises(ValueError, match="chat template"):
        llm.chat(HELLO, GREEDY, use_tqdm=False)
