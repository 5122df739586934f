"""A request's sequences (a prompt's samples: the sequence and its forks) as what the caller sees: one
`RequestOutput` at the end, or the `CompletionOutput` deltas of a stream as tokens arrive."""

from __future__ import annotations

from nvllm.outputs import CompletionOutput, RequestMetrics, RequestOutput
from nvllm.scheduler.sequence import Sequence
from nvllm.tokenizer.detokenizer import IncrementalDetokenizer, decode


def attach_detokenizer(seq: Sequence, tokenizer) -> None:
    params = seq.sampling_params
    seq.detokenizer = IncrementalDetokenizer(
        tokenizer, params.stop_strings, params.include_stop_str_in_output
    )


def _text(seq: Sequence, tokenizer) -> str:
    """The completion's text: the detokenizer's where one followed it (cut at a stop string), else decoded
    at once (the same text)."""
    if seq.detokenizer is None:
        return decode(tokenizer, seq.completion_token_ids)
    _catch_up(seq)
    seq.detokenizer.finish()
    return seq.detokenizer.text


def _catch_up(seq: Sequence) -> None:
    """Feed the detokenizer the tokens it has not seen (those of requests without stop strings, which the
    scheduler does not decode)."""
    detokenizer = seq.detokenizer
    if detokenizer.stop_reason is None:
        for token in seq.completion_token_ids[len(detokenizer.token_ids) :]:
            detokenizer.add(token, check_stop=False)


def request_output(samples: list[Sequence], tokenizer) -> RequestOutput:
    first = samples[0]
    return RequestOutput(
        prompt_token_ids=first.token_ids[: first.num_prompt_tokens],
        outputs=[
            CompletionOutput(
                index=index,
                text=_text(seq, tokenizer),
                token_ids=seq.completion_token_ids,
                finish_reason=seq.finish_reason,
                stop_reason=seq.stop_reason,
                logprobs=seq.logprobs,
            )
            for index, seq in enumerate(samples)
        ],
        num_cached_tokens=first.cached_len,
        metrics=RequestMetrics(
            arrival_time=first.arrival_time,
            first_token_time=min((s.first_token_time for s in samples if s.first_token_time), default=None),
            finished_time=max((s.finished_time for s in samples if s.finished_time), default=None),
        ),
    )


class StreamCursor:
    """How much of one sample a stream has handed out."""

    def __init__(self, seq: Sequence, index: int):
        self.seq, self.index = seq, index
        self.num_tokens = 0  # completion tokens handed out
        self.done = False

    def delta(self) -> CompletionOutput | None:
        """The sample's new tokens and text since the last delta (and its finish reason once it finished);
        None when there is nothing new."""
        seq = self.seq
        if self.done or (seq.num_completion_tokens == self.num_tokens and not seq.is_finished):
            return None
        _catch_up(seq)
        if seq.is_finished:
            seq.detokenizer.finish()
            self.done = True
        tokens = seq.completion_token_ids[self.num_tokens :]
        start, self.num_tokens = self.num_tokens, seq.num_completion_tokens
        return CompletionOutput(
            index=self.index,
            text=seq.detokenizer.new_text(),
            token_ids=tokens,
            finish_reason=seq.finish_reason,
            stop_reason=seq.stop_reason,
            logprobs=None if seq.logprobs is None else seq.logprobs[start : self.num_tokens],
        )
