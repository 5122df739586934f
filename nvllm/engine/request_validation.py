"""Requests as the engine takes them: prompts and sampling params normalised and checked before any is
queued, so that bad input is a TypeError (an argument of the wrong type) or a ValueError naming the problem,
and the engine stays as it was."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from nvllm.config import EngineConfig
from nvllm.sampling.bad_words import bad_words_token_ids
from nvllm.sampling_params import SamplingParams, is_integer
from nvllm.scheduler.block_manager import BlockManager

# a text, token ids, or vLLM's prompt dicts: {"prompt": text} or {"prompt_token_ids": token ids}
Prompt = str | list[int] | dict[str, Any]
PROMPT_KEYS = ("prompt", "prompt_token_ids")


def paired(prompts: Any, sampling_params: Any) -> list[tuple[Prompt, SamplingParams]]:
    """`generate`'s arguments as (prompt, params) pairs: one prompt, or prompts as any iterable (a list, a
    generator, the rows of an array); one SamplingParams for all (None: the default ones) or one each."""
    if isinstance(prompts, (str, dict)):
        prompts = [prompts]
    elif not isinstance(prompts, Iterable):
        raise TypeError(f"prompts must be a prompt or a list of them, got {type(prompts).__name__}")
    prompts = list(prompts)
    if prompts and is_integer(prompts[0]):
        prompts = [prompts]  # one prompt's token ids, as vLLM reads a flat list of ints
    if sampling_params is None:
        sampling_params = SamplingParams()
    if isinstance(sampling_params, SamplingParams):
        return [(prompt, sampling_params) for prompt in prompts]
    if isinstance(sampling_params, str) or not isinstance(sampling_params, Iterable):
        kind = type(sampling_params).__name__
        raise TypeError(f"expected SamplingParams or a list of them, got {kind}")
    sampling_params = list(sampling_params)
    if len(sampling_params) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but {len(sampling_params)} sampling params")
    return list(zip(prompts, sampling_params))


def longest_prompt(max_model_len: int) -> int:
    """The longest prompt taken: prompt and output together hold at most max_model_len tokens, and the
    prompt leaves room for at least one output token."""
    return max_model_len - 1


def check_priority(priority: Any) -> int:
    if not is_integer(priority):
        raise TypeError(f"priority={priority!r} must be an integer (lower is served first)")
    return int(priority)


def priorities(priority: Any, num_requests: int) -> list[int]:
    """`generate`'s `priority`: None (all 0), one integer per prompt, or one integer for one prompt."""
    if priority is None:
        return [0] * num_requests
    if is_integer(priority) and num_requests == 1:
        priority = [priority]
    if isinstance(priority, str) or not isinstance(priority, Iterable):
        raise TypeError(f"priority={priority!r} must be None or a list of one integer per prompt")
    priority = list(priority)
    if len(priority) != num_requests:
        raise ValueError(f"{num_requests} prompts but {len(priority)} priorities")
    return [check_priority(p) for p in priority]


def token_ids_of(prompt: Any, tokenizer) -> list[int]:
    """The prompt's token ids: a string tokenized, a sequence of ids (NumPy integers too) as Python ints,
    a prompt dict's; other element types are left for `check_request` to name."""
    if isinstance(prompt, dict):
        prompt = _dict_prompt(prompt)
    if isinstance(prompt, str):
        try:
            prompt.encode("utf-8")  # what the tokenizer needs (a lone surrogate has no UTF-8)
        except UnicodeError as error:
            raise ValueError(f"prompt {prompt!r} is not valid Unicode text: {error}") from None
        return tokenizer.encode(prompt)
    # a list, a tuple, or an array or tensor of one row; bytes are a sequence of ints, but of text
    is_sized_sequence = hasattr(prompt, "__len__") and hasattr(prompt, "__getitem__")
    num_dims = getattr(prompt, "ndim", 1)
    if not is_sized_sequence or isinstance(prompt, (bytes, bytearray)) or num_dims != 1:
        kind = type(prompt).__name__ + (f" with {num_dims} dimensions" if num_dims != 1 else "")
        raise TypeError(f"a prompt must be a string or a list of token ids, got {kind}")
    if isinstance(prompt, np.ndarray) and prompt.dtype.kind in "iu":
        return prompt.tolist()  # Python ints, in one pass
    token_ids = list(prompt)
    if _all_python_ints(token_ids):
        return token_ids
    return [int(t) if is_integer(t) else t for t in token_ids]


def _dict_prompt(prompt: dict) -> Any:
    """What a prompt dict holds: its `prompt_token_ids`, else its `prompt` text."""
    unknown = sorted(set(prompt) - set(PROMPT_KEYS))
    if unknown or not any(key in prompt for key in PROMPT_KEYS):
        raise ValueError(
            f"a prompt dict needs 'prompt' or 'prompt_token_ids' and nothing else, got keys {sorted(prompt)}"
        )
    return prompt["prompt_token_ids"] if "prompt_token_ids" in prompt else prompt["prompt"]


def _all_python_ints(values: list) -> bool:
    """Whether every value is a Python int (not a bool, nor a NumPy integer): one pass in C, where
    `is_integer` on each of a long prompt's tokens would cost more than the rest of its admission."""
    return set(map(type, values)) == {int}


def check_request(
    token_ids: list[int], params: SamplingParams, config: EngineConfig, block_manager: BlockManager
) -> None:
    """Raise a TypeError or ValueError for a request the engine could never serve."""
    if not isinstance(params, SamplingParams):
        raise TypeError(f"expected SamplingParams, got {type(params).__name__}")
    params.validate()  # again: its fields may have been set after it was built
    if not token_ids:
        raise ValueError("empty prompt: a request needs at least one token")
    not_integers = [] if _all_python_ints(token_ids) else [t for t in token_ids if not is_integer(t)]
    if not_integers:
        raise TypeError(f"token ids must be integers, got {not_integers[:5]}")
    vocab_size = config.model.vocab_size
    if min(token_ids) < 0 or max(token_ids) >= vocab_size:
        outside = [t for t in token_ids if not 0 <= t < vocab_size]
        raise ValueError(f"token id(s) {outside[:5]} outside the vocabulary [0, {vocab_size})")
    bad_stops = [t for t in params.stop_token_ids or [] if not t < vocab_size]
    if bad_stops:
        raise ValueError(f"stop_token_ids {bad_stops[:5]} outside the vocabulary [0, {vocab_size})")
    max_logprobs = config.scheduler.max_logprobs
    for name, num_top in (
        ("logprobs", params.num_logprobs(vocab_size)),
        ("prompt_logprobs", params.num_prompt_logprobs(vocab_size)),
    ):
        if num_top is not None and num_top > vocab_size:
            raise ValueError(f"{name}={num_top} exceeds the vocabulary size {vocab_size}")
        if num_top is not None and max_logprobs != -1 and num_top > max_logprobs:
            raise ValueError(
                f"{name}={getattr(params, name)} asks for more log-probabilities per token than "
                f"scheduler.max_logprobs={max_logprobs} (raise it, or -1 for no cap)"
            )
    if params.n > config.scheduler.max_num_seqs:
        raise ValueError(
            f"n={params.n} samples run at once, beyond scheduler.max_num_seqs={config.scheduler.max_num_seqs}"
        )
    max_model_len = config.scheduler.max_model_len
    if len(token_ids) > longest_prompt(max_model_len):
        raise ValueError(
            f"prompt of {len(token_ids)} tokens leaves no room for output within "
            f"max_model_len={max_model_len} (prompt + output tokens)"
        )
    longest = min(len(token_ids) + params.max_tokens, max_model_len)
    blocks_needed, num_blocks = block_manager.blocks_for(longest), block_manager.num_blocks
    if blocks_needed > num_blocks:
        raise ValueError(
            f"a request of up to {longest} tokens needs {blocks_needed} KV blocks but the cache has "
            f"{num_blocks}: raise cache.num_blocks or the memory budget"
        )
    # admitted together: the prompt's blocks and each other sample's copy of the last one
    blocks_at_admission = block_manager.blocks_for(len(token_ids)) + params.n - 1
    if blocks_at_admission > num_blocks:
        raise ValueError(
            f"n={params.n} samples of a {len(token_ids)}-token prompt need {blocks_at_admission} KV blocks "
            f"at once but the cache has {num_blocks}: lower n or raise the memory budget"
        )


def check_token_filters(params: SamplingParams, vocab_size: int, tokenizer) -> None:
    """Raise a ValueError naming the field whose token ids lie outside the model's vocabulary: `logit_bias`,
    `allowed_token_ids`, or the tokens of `bad_words`, which are tokenized here (into the params'
    `bad_words_token_ids`, as vLLM does at submission)."""
    words = params.bad_words
    params.bad_words_token_ids = bad_words_token_ids(words, tokenizer) if words else None
    fields = {
        "logit_bias": list(params.logit_bias or ()),
        "allowed_token_ids": params.allowed_token_ids or [],
        "bad_words": [t for ids in params.bad_words_token_ids or [] for t in ids],
    }
    for name, token_ids in fields.items():
        outside = [t for t in token_ids if not t < vocab_size]
        if outside:
            raise ValueError(f"{name}: token id(s) {outside[:5]} outside the vocabulary [0, {vocab_size})")
