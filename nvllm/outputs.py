"""What `generate` returns: one `RequestOutput` per prompt, holding a `CompletionOutput` per sample."""

from __future__ import annotations

from dataclasses import dataclass, field

# For each generated token, token id -> log-probability: the sampled token first, then the top-k of the
# model's distribution by rank (vLLM's order)
TokenLogprobs = dict[int, float]


@dataclass
class CompletionOutput:
    """One sample. `finish_reason`: "stop" (EOS, a stop token or a stop string) or "length" (`max_tokens`
    or `max_model_len`); `stop_reason`: the stop string or stop token id that ended it (None for EOS and
    length stops, as vLLM reports)."""

    index: int
    text: str
    token_ids: list[int]
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    logprobs: list[TokenLogprobs] | None = None  # set when the request asked for `logprobs`
    cumulative_logprob: float | None = None  # the sampled tokens' log-probabilities summed (with `logprobs`)

    def __reduce__(self):
        # the fields in their order (as __init__ set them), not a dict of them, which costs more to pickle
        # and to read back: a served engine pickles one for every stream at every step
        return CompletionOutput, tuple(vars(self).values())


@dataclass
class RequestMetrics:
    """Wall-clock times (`time.time()`) of the request: when it was queued, when a prefill step first took
    it, when its first token reached the host, when it finished."""

    arrival_time: float
    first_token_time: float | None = None
    finished_time: float | None = None
    first_scheduled_time: float | None = None

    @property
    def time_in_queue(self) -> float | None:
        """Waiting for its first prefill step."""
        return None if self.first_scheduled_time is None else self.first_scheduled_time - self.arrival_time

    @property
    def time_to_first_token(self) -> float | None:
        return None if self.first_token_time is None else self.first_token_time - self.arrival_time

    @property
    def latency(self) -> float | None:
        return None if self.finished_time is None else self.finished_time - self.arrival_time


@dataclass
class RequestOutput:
    """One prompt's result. `out["text"]` and `out["token_ids"]` are the first sample's."""

    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    # with `prompt_logprobs`: per prompt position, token id -> log-probability of the prompt token, then of
    # the top k (position 0: None)
    prompt_logprobs: list[TokenLogprobs | None] | None = None
    # what differs between runs of the same request is not compared: cache hits and times
    num_cached_tokens: int = field(default=0, compare=False)  # prompt tokens found in the prefix cache
    metrics: RequestMetrics | None = field(default=None, compare=False)

    def __getitem__(self, key: str):
        if key not in ("text", "token_ids"):
            raise KeyError(f"{key!r}: a RequestOutput reads as a mapping of 'text' and 'token_ids' only")
        return getattr(self.outputs[0], key)

    @property
    def finished(self) -> bool:
        return all(output.finish_reason is not None for output in self.outputs)
