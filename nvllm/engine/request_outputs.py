"""A request's sequences (a prompt's samples: the sequence and its forks) as what the caller sees: one
`RequestOutput` at the end, or the `CompletionOutput` deltas of a stream as tokens arrive."""

from __future__ import annotations

from nvllm.outputs import CompletionOutput, RequestMetrics, RequestOutput
from nvllm.scheduler.sequence import Sequence
from nvllm.scheduler.stops import STOP
from nvllm.tokenizer.detokenizer import IncrementalDetokenizer, decode


def attach_detokenizer(seq: Sequence, tokenizer) -> None:
    """Follow the sequence's text as tokens arrive; none where the request asked for no text
    (`detokenize=False`)."""
    params = seq.sampling_params
    if not params.detokenize:
        return
    seq.detokenizer = IncrementalDetokenizer(
        tokenizer,
        params.stop_strings,
        params.include_stop_str_in_output,
        skip_special_tokens=params.skip_special_tokens,
    )


def _num_text_tokens(seq: Sequence) -> int:
    """How many of the completion tokens make its text: all but a stop token (EOS or one of
    `stop_token_ids`) that ended it, whose text vLLM leaves out whatever `include_stop_str_in_output` says.
    A structured output's grammar that ended on a token of text keeps it."""
    stopped_by_token = seq.finish_reason == STOP and not isinstance(seq.stop_reason, str)
    if seq.stop_reason is None and seq.grammar is not None and seq.grammar.ends_on_text:
        stopped_by_token = False
    return seq.num_completion_tokens - stopped_by_token


def _text(seq: Sequence, tokenizer) -> str:
    """The completion's text: the detokenizer's where one followed it (cut at a stop string), else decoded
    at once (the same text); "" with `detokenize=False`."""
    params = seq.sampling_params
    if not params.detokenize:
        return ""
    if seq.detokenizer is None:
        return decode(
            tokenizer, seq.completion_token_ids_between(0, _num_text_tokens(seq)), params.skip_special_tokens
        )
    _catch_up(seq)
    seq.detokenizer.finish()
    return seq.detokenizer.text


def _catch_up(seq: Sequence) -> None:
    """Feed the detokenizer the tokens it has not seen (those of requests without stop strings, which the
    scheduler does not decode)."""
    detokenizer = seq.detokenizer
    if detokenizer.stop_reason is None:
        for token in seq.completion_token_ids_between(len(detokenizer.token_ids), _num_text_tokens(seq)):
            detokenizer.add(token, check_stop=False)


def logprob_sum(seq: Sequence, start: int, end: int) -> float | None:
    """The sum of the log-probabilities of sampled tokens `start` to `end` (None unless the request asked
    for `logprobs`)."""
    if seq.logprobs is None:
        return None
    tokens = seq.completion_token_ids_between(start, end)
    return sum(entry[token] for token, entry in zip(tokens, seq.logprobs[start:end]))


def request_output(samples: list[Sequence], tokenizer) -> RequestOutput:
    first = samples[0]
    return RequestOutput(
        prompt_token_ids=first.token_ids[: first.num_prompt_tokens],
        prompt_logprobs=first.prompt_logprobs,
        outputs=[
            CompletionOutput(
                index=index,
                text=_text(seq, tokenizer),
                token_ids=seq.completion_token_ids,
                finish_reason=seq.finish_reason,
                stop_reason=seq.stop_reason,
                logprobs=seq.logprobs,
                cumulative_logprob=logprob_sum(seq, 0, seq.num_completion_tokens),
            )
            for index, seq in enumerate(samples)
        ],
        num_cached_tokens=first.cached_len,
        metrics=RequestMetrics(
            arrival_time=first.arrival_time,
            first_token_time=min((s.first_token_time for s in samples if s.first_token_time), default=None),
            finished_time=max((s.finished_time for s in samples if s.finished_time), default=None),
            first_scheduled_time=first.first_scheduled_time,
        ),
    )


class StreamCursor:
    """How much of one sample a stream has handed out."""

    def __init__(self, seq: Sequence, index: int):
        self.seq, self.index = seq, index
        self.num_tokens = 0  # completion tokens handed out
        self.cumulative_logprob = 0.0  # theirs, kept as they go: a long stream is not summed again each time
        self.done = False

    def delta(self) -> CompletionOutput | None:
        """The sample's new tokens and the text of exactly those tokens since the last delta (a token whose
        text is held back, as the start of a possible stop string or half a character, waits with it), and
        its finish reason once it finished; None when there is nothing new."""
        seq = self.seq
        if self.done or (seq.num_completion_tokens == self.num_tokens and not seq.is_finished):
            return None
        self.done = seq.is_finished
        if seq.detokenizer is None:  # detokenize=False: every token goes out at once, with no text
            text, end = "", seq.num_completion_tokens
        else:
            _catch_up(seq)
            if self.done:
                seq.detokenizer.finish()
            text = seq.detokenizer.new_text()
            end = seq.num_completion_tokens if self.done else seq.detokenizer.num_streamed_tokens
        if end == self.num_tokens and not self.done:
            return None
        start, self.num_tokens = self.num_tokens, end
        new_logprobs = logprob_sum(seq, start, end)
        if new_logprobs is not None:
            self.cumulative_logprob += new_logprobs
        return CompletionOutput(
            index=self.index,
            text=text,
            token_ids=seq.completion_token_ids_between(start, end),
            finish_reason=seq.finish_reason,
            stop_reason=seq.stop_reason,
            logprobs=None if seq.logprobs is None else seq.logprobs[start:end],
            cumulative_logprob=None if new_logprobs is None else self.cumulative_logprob,
        )
