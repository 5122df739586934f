from __future__ import annotations

import numbers
import sys
from dataclasses import dataclass, field

from nvllm.sampling.structured_params import StructuredOutputsParams, structured_outputs_of

# Temperatures below this sample greedily: dividing logits by a smaller one overflows float32 (a logit of 40
# over 1e-38 is past 3.4e38), and the draw is the argmax anyway. vLLM uses the same threshold.
GREEDY_BELOW_TEMPERATURE = 1e-5
MAX_SEED = 2**64  # torch.Generator.manual_seed takes [0, 2**64)
MAX_TOP_K = 2**31 - 1
# Counts and token ids become int64 tensors in the engine: a larger one would fail there, mid-call, taking the
# other requests of the call with it. Checked here instead.
INT64_LIMIT = 2**63
MAX_PENALTY = 2.0  # presence and frequency penalties lie in [-2, 2], as in OpenAI's API and vLLM
MAX_LOGIT_BIAS = 100.0  # a logit bias lies in [-100, 100], as OpenAI's API defines it


def is_integer(value: object) -> bool:
    """An integer as the engine takes one: Python or NumPy, but not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_real(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


@dataclass
class SamplingParams:
    """How one request samples. temperature=0 (or below GREEDY_BELOW_TEMPERATURE) is greedy; top_k=-1 and
    top_p=1 disable those filters. Every field is checked when it is built and again when it is submitted."""

    temperature: float = 1.0
    max_tokens: int = 64
    ignore_eos: bool = False
    top_k: int = -1
    top_p: float = 1.0
    seed: int | None = None  # a per-request seed makes this request's samples reproducible
    n: int = 1  # samples of the prompt, which is computed once and whose KV blocks they share
    stop: str | list[str] | None = None  # text that stops it; the output is cut before it
    stop_token_ids: list[int] | None = None  # tokens that stop it (kept in the token ids), as EOS does
    include_stop_str_in_output: bool = False
    min_tokens: int = 0  # EOS and `stop_token_ids` cannot be sampled, nor `stop` match, before this many
    # per generated token: the sampled token's and the top-k log-probabilities (-1: the whole vocabulary)
    logprobs: int | None = None
    presence_penalty: float = 0.0  # subtracted from the logits of tokens the output holds
    frequency_penalty: float = 0.0  # times the count of each token in the output, subtracted
    repetition_penalty: float = 1.0  # divides positive / multiplies negative logits of tokens seen so far
    min_p: float = 0.0  # tokens less likely than min_p times the likeliest one are dropped (0: off)
    logit_bias: dict[int, float] | None = None  # token id -> added to its logit, before temperature
    allowed_token_ids: list[int] | None = None  # only these tokens can be sampled
    bad_words: list[str] | None = None  # words whose tokens are never sampled in this sequence
    # `bad_words` as token sequences, written by the engine at submission with its tokenizer
    bad_words_token_ids: list[list[int]] | None = field(default=None, init=False, repr=False, compare=False)
    # per prompt position after the first: the prompt token's and the top-k log-probabilities (-1: all)
    prompt_logprobs: int | None = None
    skip_special_tokens: bool = True  # the tokens marked special leave no text (vLLM's default)
    spaces_between_special_tokens: bool = True  # vLLM's; byte-level tokenizers put none either way
    detokenize: bool = True  # False: token ids only, every text ""
    # the output's shape: a StructuredOutputsParams or a dict of its fields ({"json": schema}, {"regex": ..})
    structured_outputs: StructuredOutputsParams | dict | None = None
    stop_strings: list[str] = field(init=False, repr=False, compare=False)  # `stop` as a list

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise a ValueError naming the first field that is wrong; then hold the numbers as Python's (NumPy
        scalars overflow in the engine's arithmetic, an np.int32 max_tokens plus a prompt's length, and
        torch.Generator.manual_seed refuses them). The values do not change."""
        if not is_integer(self.max_tokens) or not 1 <= self.max_tokens < INT64_LIMIT:
            raise ValueError(f"max_tokens={self.max_tokens!r} must be an integer >= 1 and < 2**63")
        if not is_real(self.temperature) or not 0 <= self.temperature <= sys.float_info.max:  # NaN too
            raise ValueError(
                f"temperature={self.temperature!r} must be a finite number >= 0 (0 means greedy)"
            )
        if not is_real(self.top_p) or not 0 < self.top_p <= 1:
            raise ValueError(f"top_p={self.top_p!r} must be a number in (0, 1]")
        if not is_integer(self.top_k) or self.top_k == 0 or not -1 <= self.top_k <= MAX_TOP_K:
            raise ValueError(f"top_k={self.top_k!r} must be -1 (disabled) or an integer in [1, {MAX_TOP_K}]")
        if not isinstance(self.ignore_eos, bool):
            raise ValueError(f"ignore_eos={self.ignore_eos!r} must be True or False")
        if self.seed is not None and (not is_integer(self.seed) or not 0 <= self.seed < MAX_SEED):
            raise ValueError(f"seed={self.seed!r} must be None or an integer in [0, 2**64)")
        if not is_integer(self.n) or not 1 <= self.n < INT64_LIMIT:
            raise ValueError(f"n={self.n!r} must be an integer in [1, 2**63)")
        stop = [self.stop] if isinstance(self.stop, str) else self.stop
        if stop is not None and (
            not isinstance(stop, (list, tuple)) or not all(isinstance(s, str) and s for s in stop)
        ):
            raise ValueError(f"stop={self.stop!r} must be None, a non-empty string or a list of them")
        stop_ids = self.stop_token_ids
        if stop_ids is not None and (
            not isinstance(stop_ids, (list, tuple))
            or not all(is_integer(t) and 0 <= t < INT64_LIMIT for t in stop_ids)
        ):
            raise ValueError(
                f"stop_token_ids={stop_ids!r} must be None or a list of token ids (ints in [0, 2**63))"
            )
        if not isinstance(self.include_stop_str_in_output, bool):
            raise ValueError(
                f"include_stop_str_in_output={self.include_stop_str_in_output!r} must be True or False"
            )
        if not is_integer(self.min_tokens) or not 0 <= self.min_tokens <= self.max_tokens:
            raise ValueError(f"min_tokens={self.min_tokens!r} must be an integer in [0, max_tokens]")
        logprobs = self.logprobs
        if logprobs is not None and (not is_integer(logprobs) or not -1 <= logprobs < INT64_LIMIT):
            raise ValueError(f"logprobs={logprobs!r} must be None, -1 (all) or an integer in [0, 2**63)")
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            if not is_real(value) or not -MAX_PENALTY <= value <= MAX_PENALTY:
                raise ValueError(f"{name}={value!r} must be a number in [-2, 2]")
        prompt_logprobs = self.prompt_logprobs
        if prompt_logprobs is not None and (
            not is_integer(prompt_logprobs) or not -1 <= prompt_logprobs < INT64_LIMIT
        ):
            raise ValueError(
                f"prompt_logprobs={prompt_logprobs!r} must be None, -1 (all) or an integer in [0, 2**63)"
            )
        for name in ("skip_special_tokens", "spaces_between_special_tokens", "detokenize"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}={getattr(self, name)!r} must be True or False")
        if not self.detokenize and stop:
            raise ValueError(f"stop={self.stop!r} needs the text: it cannot be used with detokenize=False")
        if not is_real(self.repetition_penalty) or not 0 < self.repetition_penalty <= sys.float_info.max:
            raise ValueError(
                f"repetition_penalty={self.repetition_penalty!r} must be a finite number > 0 (1: none)"
            )
        if not is_real(self.min_p) or not 0 <= self.min_p <= 1:
            raise ValueError(f"min_p={self.min_p!r} must be a number in [0, 1] (0: off)")
        self._validate_token_filters()
        self.structured_outputs = structured_outputs_of(self.structured_outputs)
        self.max_tokens, self.top_k = int(self.max_tokens), int(self.top_k)
        self.temperature, self.top_p = float(self.temperature), float(self.top_p)
        self.seed = None if self.seed is None else int(self.seed)
        self.n, self.min_tokens = int(self.n), int(self.min_tokens)
        self.logprobs = None if self.logprobs is None else int(self.logprobs)
        self.prompt_logprobs = None if prompt_logprobs is None else int(prompt_logprobs)
        self.stop_strings = list(stop or [])
        self.stop_token_ids = None if stop_ids is None else [int(t) for t in stop_ids]
        self.presence_penalty = float(self.presence_penalty)
        self.frequency_penalty = float(self.frequency_penalty)
        self.repetition_penalty = float(self.repetition_penalty)
        self.min_p = float(self.min_p)

    def _validate_token_filters(self) -> None:
        """`logit_bias`, `allowed_token_ids` and `bad_words`, held as Python ints, floats and lists; the
        token ids are checked against the model's vocabulary at submission."""
        bias = self.logit_bias
        if bias is not None:
            if not isinstance(bias, dict) or not all(
                is_integer(t) and 0 <= t < INT64_LIMIT and is_real(b) and abs(b) <= MAX_LOGIT_BIAS
                for t, b in bias.items()
            ):
                raise ValueError(
                    f"logit_bias={bias!r} must be None or a dict of token ids (ints >= 0) to biases in "
                    f"[-{MAX_LOGIT_BIAS:g}, {MAX_LOGIT_BIAS:g}]"
                )
            self.logit_bias = {int(t): float(b) for t, b in bias.items()}
        allowed = self.allowed_token_ids
        if allowed is not None:
            if (
                not isinstance(allowed, (list, tuple))
                or not allowed
                or not all(is_integer(t) and 0 <= t < INT64_LIMIT for t in allowed)
            ):
                raise ValueError(
                    f"allowed_token_ids={allowed!r} must be None or a non-empty list of token ids (ints >= 0)"
                )
            self.allowed_token_ids = [int(t) for t in allowed]
        words = self.bad_words
        if words is not None:
            if not isinstance(words, (list, tuple)) or not all(
                isinstance(word, str) and word.strip() for word in words
            ):
                raise ValueError(f"bad_words={words!r} must be None or a list of non-blank strings")
            self.bad_words = list(words)

    def num_logprobs(self, vocab_size: int) -> int | None:
        """How many top log-probabilities each generated token reports (None: no log-probabilities)."""
        return vocab_size if self.logprobs == -1 else self.logprobs

    def num_prompt_logprobs(self, vocab_size: int) -> int | None:
        """How many top log-probabilities each prompt position reports (None: no prompt log-probabilities)."""
        return vocab_size if self.prompt_logprobs == -1 else self.prompt_logprobs

    @property
    def is_greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW_TEMPERATURE

    @property
    def filters_tokens(self) -> bool:
        """Whether a logit bias, allowed tokens or bad words change which tokens this request samples."""
        return bool(self.logit_bias or self.allowed_token_ids or self.bad_words)

    @property
    def has_penalties(self) -> bool:
        return self.presence_penalty != 0 or self.frequency_penalty != 0 or self.repetition_penalty != 1
