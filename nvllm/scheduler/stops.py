"""Every rule that ends a sequence: EOS, `stop_token_ids`, stop strings (on the text, across token
boundaries), `max_tokens` and `max_model_len`, with `min_tokens` holding the stops back, and the end of a
structured output's grammar."""

from __future__ import annotations

from nvllm.scheduler.sequence import Sequence

STOP, LENGTH = "stop", "length"


class StopChecker:
    def __init__(self, eos_token_ids: tuple[int, ...], max_model_len: int):
        self.eos_token_ids = frozenset(eos_token_ids)
        self.max_model_len = max_model_len

    def tokens_left(self, seq: Sequence, length: int | None = None) -> int:
        """Tokens the sequence may still take before `max_tokens` or `max_model_len` stops it, once it is
        `length` tokens long (default: its length on the device)."""
        length = seq.device_len if length is None else length
        num_completion_tokens = length - seq.num_prompt_tokens
        return min(seq.sampling_params.max_tokens - num_completion_tokens, self.max_model_len - length)

    def take(self, seq: Sequence, new_tokens: list[int]) -> tuple[int, tuple[str, str | int | None] | None]:
        """How many of `new_tokens`, sampled after the sequence's host tokens, it takes (up to and including
        the first that stops it), and the stop: (finish reason, stop reason), or None. A stop token or string
        counts once the output has `min_tokens` tokens before it (the sampler never draws a stop token
        before)."""
        stop_at = self.tokens_left(seq, seq.host_len)  # 0 at max_model_len: the token it got would pass it
        if stop_at <= 0:
            return 0, (LENGTH, None)
        grammar_end = self._grammar_end(seq)
        stop = self._first_stop(seq, new_tokens[: min(stop_at, grammar_end)])
        if stop is not None:
            return stop[0] + 1, (STOP, stop[1])
        if grammar_end <= min(stop_at, len(new_tokens)):
            return grammar_end, (STOP, None)
        if stop_at <= len(new_tokens):
            return stop_at, (LENGTH, None)
        return len(new_tokens), None

    @staticmethod
    def _grammar_end(seq: Sequence) -> int:
        """How many more tokens the sequence takes before its grammar's end (structured outputs: the output
        is complete), or a number past any round where it has not ended."""
        grammar = seq.grammar
        if grammar is None or grammar.end_len is None:
            return seq.sampling_params.max_tokens + 1
        return grammar.end_len - seq.num_completion_tokens

    def _first_stop(self, seq: Sequence, tokens: list[int]) -> tuple[int, str | int | None] | None:
        """The index of the first of `tokens` that stops the sequence, and its stop reason, or None."""
        params = seq.sampling_params
        if not params.stop_strings and not params.stop_token_ids and not params.min_tokens:
            # EOS alone (most requests): no per-token work
            if not params.ignore_eos and not self.eos_token_ids.isdisjoint(tokens):
                return next(i for i, token in enumerate(tokens) if token in self.eos_token_ids), None
            return None
        stop_ids = params.stop_token_ids or ()
        detokenizer = seq.detokenizer if params.stop_strings else None
        for index, token in enumerate(tokens):
            # vLLM's rule for stop tokens and strings alike: only a token past the first `min_tokens` stops
            may_stop = seq.num_completion_tokens + index >= params.min_tokens
            is_eos = token in self.eos_token_ids and not params.ignore_eos
            if may_stop and (is_eos or token in stop_ids):
                # EOS first, as vLLM checks it: its stop reason is None even when it is a stop token id too
                return index, None if is_eos else token  # its text is not the output's
            if detokenizer is not None and detokenizer.add(token, may_stop):
                return index, detokenizer.stop_reason
        return None
