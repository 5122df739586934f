"""Structured outputs at submission: a request's schema, regex or grammar compiled (a ValueError naming
the problem before any state changes) and each of its samples given a matcher of its own. The grammar
compiler, and with it llguidance, is made on the first request that asks."""

from __future__ import annotations

from nvllm.config import ModelConfig
from nvllm.sampling.grammar_compiler import GrammarCompiler
from nvllm.sampling_params import SamplingParams
from nvllm.scheduler.sequence import Sequence
from nvllm.tokenizer.tokenizer import Tokenizer


class StructuredOutputs:
    def __init__(self, tokenizer: Tokenizer, model: ModelConfig):
        self.tokenizer, self.model = tokenizer, model
        self._compiler: GrammarCompiler | None = None

    def check(self, params: SamplingParams) -> None:
        if params.structured_outputs is not None:
            self._grammar_compiler().compile(params.structured_outputs)

    def attach(self, seq: Sequence) -> None:
        """Give the request `seq` and its forks (its other samples) their matchers."""
        params = seq.sampling_params.structured_outputs
        if params is not None:
            for member in (seq, *seq.forks):
                member.grammar = self._grammar_compiler().new_state(params)

    def _grammar_compiler(self) -> GrammarCompiler:
        if self._compiler is None:
            self._compiler = GrammarCompiler(self.tokenizer, self.model.vocab_size, self.model.eos_token_ids)
        return self._compiler
