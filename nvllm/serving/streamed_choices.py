"""A request's choices (one per sample) as OpenAI renders them: each delta as a stream chunk's choice, or
the deltas gathered into whole choices; and the completion tokens counted for usage."""

from __future__ import annotations

from nvllm.outputs import CompletionOutput
from nvllm.sampling_params import SamplingParams
from nvllm.serving.request_mapping import Endpoint
from nvllm.serving.responses import chat_logprobs, completion_logprobs


class ChoiceAccumulator:
    def __init__(self, endpoint: Endpoint, params: SamplingParams, tokenizer):
        self.endpoint, self.params, self.tokenizer = endpoint, params, tokenizer
        self.num_tokens = 0
        # per sample: its text's pieces and length, tokens, log-probabilities and (finish reason, stop
        # reason) so far; the pieces are joined once, at the end (a long stream's text is never copied whole
        # at each of its chunks)
        self.gathered = [
            {"text": [], "text_len": 0, "tokens": [], "logprobs": [], "end": (None, None)}
            for _ in range(params.n)
        ]

    def openings(self) -> list[dict]:
        """Chat streams open each choice with the assistant's role."""
        if self.endpoint != "chat":
            return []
        return [
            {
                "index": index,
                "delta": {"role": "assistant", "content": ""},
                "logprobs": None,
                "finish_reason": None,
            }
            for index in range(self.params.n)
        ]

    def _logprobs(self, delta: CompletionOutput, text_offset: int) -> dict | None:
        if delta.logprobs is None:
            return None
        if self.endpoint == "chat":
            return chat_logprobs(delta, self.tokenizer, self.params.logprobs)
        return completion_logprobs(delta, self.tokenizer, self.params.logprobs, text_offset)

    def chunk(self, delta: CompletionOutput) -> dict:
        """A stream chunk's choice for `delta`."""
        logprobs = self._logprobs(delta, self.gathered[delta.index]["text_len"])
        self.add(delta)
        choice = {"index": delta.index, "logprobs": logprobs, "finish_reason": delta.finish_reason}
        if self.endpoint == "chat":
            return {**choice, "delta": {"content": delta.text}}
        return {**choice, "text": delta.text, "stop_reason": delta.stop_reason}

    def add(self, delta: CompletionOutput) -> None:
        gathered = self.gathered[delta.index]
        gathered["text"].append(delta.text)
        gathered["text_len"] += len(delta.text)
        gathered["tokens"].extend(delta.token_ids)
        gathered["logprobs"].extend(delta.logprobs or [])
        gathered["end"] = (delta.finish_reason, delta.stop_reason)
        self.num_tokens += len(delta.token_ids)

    def whole(self) -> list[dict]:
        """The gathered choices of a response that is not streamed."""
        choices = []
        for index, gathered in enumerate(self.gathered):
            logprobs = gathered["logprobs"] if self.params.logprobs is not None else None
            text = "".join(gathered["text"])
            whole = CompletionOutput(index, text, gathered["tokens"], *gathered["end"], logprobs)
            choice = {
                "index": index,
                "logprobs": self._logprobs(whole, 0),
                "finish_reason": whole.finish_reason,
                "stop_reason": whole.stop_reason,
            }
            if self.endpoint == "chat":
                choices.append({**choice, "message": {"role": "assistant", "content": whole.text}})
            else:
                choices.append({**choice, "text": whole.text})
        return choices
