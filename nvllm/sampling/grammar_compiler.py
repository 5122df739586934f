"""The owner of the grammar engine, llguidance (chosen over xgrammar: docs/requests.md): it turns a request's
`StructuredOutputsParams` into a compiled grammar, checked at submission and cached by its text, and gives
each sample a matcher of its own (`GrammarState`). llguidance is imported on the first request that asks
for structured outputs (`pip install -e ".[structured]"`)."""

from __future__ import annotations

import json
from collections import OrderedDict

from nvllm.sampling.structured_params import StructuredOutputsParams
from nvllm.tokenizer.tokenizer import Tokenizer

MAX_CACHED_GRAMMARS = 256


def import_llguidance():
    try:
        import llguidance
        import llguidance.torch  # the bitmask helpers (GrammarMasks)
    except ImportError as error:
        raise ImportError(
            'structured outputs need llguidance: pip install -e ".[structured]" (or pip install llguidance)'
        ) from error
    return llguidance


class GrammarState:
    """One sample's matcher: the grammar's state after the output tokens it consumed (`num_consumed`), and
    `end_len`, the number of output tokens the output keeps once the grammar has ended (None until then).
    Advanced by the sampler's grammar masks as tokens are sampled, on the device's side of the round: it
    keeps its state through a preemption, whose recompute samples after the same tokens."""

    def __init__(self, matcher, mask_width: int, eos_token_ids: tuple[int, ...]):
        self.matcher = matcher
        self.mask_width = mask_width  # the tokens its bitmask covers (the model's logits and more)
        self.eos_token_ids = eos_token_ids
        self.num_consumed = 0
        self.end_len: int | None = None
        # ended on a token of its text (not on EOS, which the output's text leaves out)
        self.ends_on_text = False

    def consume(self, token: int) -> None:
        if self.end_len is not None:
            return  # tokens past the end are dropped by the stop check
        if not self.matcher.consume_token(token):
            # a token the mask forbade: only drawn when the mask left no token of the model's vocabulary
            # (a grammar that may only end with an EOS outside it); the output ends before it
            self.end_len = self.num_consumed
            return
        self.num_consumed += 1
        if self.matcher.is_stopped():  # nothing but EOS may follow: the output is complete
            self.end_len = self.num_consumed
            self.ends_on_text = token not in self.eos_token_ids


class GrammarCompiler:
    """Compiled grammars for one tokenizer, cached by their text (the least recently used dropped past
    MAX_CACHED_GRAMMARS)."""

    def __init__(self, tokenizer: Tokenizer, vocab_size: int, eos_token_ids: tuple[int, ...]):
        self.llguidance = import_llguidance()
        # the model's logits may be wider than the tokenizer (Qwen3 pads to 151,936): those ids are never
        # allowed
        self.ll_tokenizer = self.llguidance.LLTokenizer(
            tokenizer.backend.to_str(), n_vocab=max(len(tokenizer), vocab_size), eos_token=list(eos_token_ids)
        )
        self.eos_token_ids = eos_token_ids
        self._compiled: OrderedDict[tuple[str, str], object] = OrderedDict()

    def compile(self, params: StructuredOutputsParams) -> object:
        """A matcher at the grammar's start, the template of each sample's; ValueError naming the problem
        when the schema, regex or grammar is invalid."""
        key = params.key
        matcher = self._compiled.get(key)
        if matcher is None:
            matcher = self.llguidance.LLMatcher(self.ll_tokenizer, self._grammar(params), log_level=0)
            if matcher.is_error():
                raise ValueError(f"structured_outputs {params.kind} is invalid: {matcher.get_error()}")
            self._compiled[key] = matcher
            if len(self._compiled) > MAX_CACHED_GRAMMARS:
                self._compiled.popitem(last=False)
        self._compiled.move_to_end(key)
        return matcher

    def new_state(self, params: StructuredOutputsParams) -> GrammarState:
        matcher = self.compile(params).deep_copy()
        return GrammarState(matcher, self.ll_tokenizer.vocab_size, self.eos_token_ids)

    def _grammar(self, params: StructuredOutputsParams) -> str:
        matcher = self.llguidance.LLMatcher
        if params.json is not None:
            schema = params.json
            if isinstance(schema, str):
                try:
                    schema = json.loads(schema)
                except json.JSONDecodeError as error:
                    raise ValueError(f"structured_outputs json is not valid JSON: {error}") from None
            # compact JSON, without whitespace between items (which a model could otherwise emit without
            # end); a schema may allow it with llguidance's "x-guidance" key
            return matcher.grammar_from_json_schema(
                json.dumps(schema), defaults={"whitespace_flexible": False}
            )
        if params.regex is not None:
            return matcher.grammar_from_regex(params.regex)
        if params.choice is not None:
            # Lark's string literals take JSON's escapes
            alternatives = " | ".join(json.dumps(choice, ensure_ascii=False) for choice in params.choice)
            return matcher.grammar_from_lark(f"start: {alternatives}")
        return matcher.grammar_from_lark(params.grammar)
