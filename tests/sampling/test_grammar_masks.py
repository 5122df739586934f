"""The grammar's bitmask on a batch's logits, by hand: only the constrained rows are masked, EOS only where
the grammar accepts, each row's matcher advanced by its own sampled tokens (none for a step it sits out), the
end of the grammar recorded; compiled grammars cached by their text; a clear error without llguidance."""

import sys
from types import SimpleNamespace

import pytest
import torch

from nvllm.config import ModelConfig
from nvllm.sampling.grammar_compiler import GrammarCompiler, import_llguidance
from nvllm.sampling.grammar_masks import grammar_masks
from nvllm.sampling.structured_params import StructuredOutputsParams
from nvllm.sampling_params import SamplingParams
from nvllm.scheduler.sequence import Sequence
from nvllm.scheduler.stops import STOP, StopChecker
from nvllm.tokenizer.tokenizer import load_tokenizer

MODEL = ModelConfig()
DIGITS = StructuredOutputsParams(regex="[0-9]{2,3}")


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(None)


@pytest.fixture(scope="module")
def compiler(tokenizer):
    return GrammarCompiler(tokenizer, MODEL.vocab_size, MODEL.eos_token_ids)


def constrained_seq(compiler, params: StructuredOutputsParams) -> Sequence:
    seq = Sequence([1, 2, 3], SamplingParams(structured_outputs=params))
    seq.grammar = compiler.new_state(params)
    return seq


def test_only_the_grammars_tokens_and_eos_once_it_accepts(compiler, tokenizer):
    free, seq = Sequence([1, 2, 3], SamplingParams()), constrained_seq(compiler, DIGITS)
    masks = grammar_masks([free, seq], None, "cpu")
    logits = torch.randn(2, MODEL.vocab_size)
    one, two, three, letter = (tokenizer.token_to_id(t) for t in ("1", "2", "3", "a"))
    eos = MODEL.eos_token_id
    for consumed, token in enumerate((one, two, three)):
        masked = masks.masked(logits, step=0)
        assert torch.equal(masked[0], logits[0])  # the free row: untouched
        allowed = masked[1] > float("-inf")
        assert allowed[one] and allowed[two] and not allowed[letter]
        assert torch.equal(masked[1][allowed], logits[1][allowed])
        assert bool(allowed[eos]) == (consumed >= 2)  # `[0-9]{2,3}` accepts from two digits on
        masks.accept(torch.tensor([letter, token]), step=0)
        assert seq.grammar.num_consumed == consumed + 1
    # three digits: nothing may follow, and the output keeps all three
    assert seq.grammar.end_len == 3 and seq.grammar.ends_on_text


def test_a_row_sitting_a_step_out_consumes_nothing(compiler, tokenizer):
    seqs = [constrained_seq(compiler, DIGITS), constrained_seq(compiler, DIGITS)]
    masks = grammar_masks(seqs, [2, 1], "cpu")
    one = tokenizer.token_to_id("1")
    for step in range(2):
        masks.masked(torch.zeros(2, MODEL.vocab_size), step)
        masks.accept(torch.tensor([one, one]), step)
    assert [seq.grammar.num_consumed for seq in seqs] == [2, 1]


def test_the_output_stops_at_the_grammars_end(compiler, tokenizer):
    seq = constrained_seq(compiler, StructuredOutputsParams(choice=["12"]))
    one, two, three = (tokenizer.token_to_id(t) for t in ("1", "2", "3"))
    for token in (one, two):
        seq.grammar.consume(token)
    # a round sampled past the end: the tokens after it are not the output's
    assert StopChecker(MODEL.eos_token_ids, 1000).take(seq, [one, two, three, three]) == (2, (STOP, None))


def test_compiled_grammars_are_cached_by_text(compiler):
    first = compiler.compile(StructuredOutputsParams(json={"type": "object", "required": []}))
    assert compiler.compile(StructuredOutputsParams(json='{"required": [], "type": "object"}')) is first
    assert compiler.new_state(DIGITS).matcher is not compiler.new_state(DIGITS).matcher


def test_without_llguidance_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "llguidance", None)
    with pytest.raises(ImportError, match=r'pip install -e "\.\[structured\]"'):
        import_llguidance()


def test_unconstrained_batches_build_no_masks():
    seqs = [SimpleNamespace(grammar=None)] * 3
    assert grammar_masks(seqs, [4, 4, 4], "cpu") is None
