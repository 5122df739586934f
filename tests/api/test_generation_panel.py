"""The terminal panel of `generate`: on a terminal, the bar's postfix carries the batch, KV-cache use and the
requests by state as the engine holds them (an oracle read off the engine after the last step); `nvllm run`'s
harness shows nothing when stderr is no terminal; `generate(use_tqdm=True)` from Python shows its bar anyway,
as vLLM's does."""

import io
import re
import sys

import pytest

from experiments.harness.engine import timed_generate
from nvllm import SamplingParams
from nvllm.engine.generation_panel import GenerationPanel
from tests.helpers.engine_utils import random_prompt, tiny_llm

PROMPTS = [random_prompt(8 + i, seed=730 + i) for i in range(5)]
PARAMS = [SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)] * len(PROMPTS)


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(scope="module")
def llm():
    # 2 sequences a batch over 5 requests: the last step runs a batch of 1, three requests ran before it
    with tiny_llm(max_num_seqs=2, kvcache_block_size=16, num_kvcache_blocks=12) as engine:
        yield engine


def last_frame(text: str) -> str:
    return text.replace("\r", "\n").strip().splitlines()[-1]


def test_the_panel_shows_the_engine_state_on_a_terminal(llm, monkeypatch):
    terminal = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    timed_generate(llm, PROMPTS, PARAMS)
    frame = last_frame(terminal.getvalue())
    blocks = llm.block_manager
    used = blocks.num_blocks - blocks.num_free_blocks
    assert llm.last_batch_size == 1
    assert f"batch 1 | KV {used}/12 {used / 12:.0%} |" in frame
    assert "running 0 waiting 0 finished 5/5 preempted 0" in frame
    assert re.search(r"30/30 \[\d\d:\d\d<00:00, +[\d.]+tok/s", frame)  # the tokens, rate and ETA


def test_the_harness_is_silent_when_stderr_is_no_terminal(llm, monkeypatch):
    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)
    timed_generate(llm, PROMPTS, PARAMS)
    assert log.getvalue() == ""


def test_generate_from_python_shows_its_bar_on_any_stderr(llm, monkeypatch):
    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)
    llm.generate(PROMPTS, PARAMS)
    assert "finished 5/5" in last_frame(log.getvalue())


def test_the_postfix_after_the_first_step(llm, monkeypatch):
    monkeypatch.setattr(sys, "stderr", FakeTerminal())
    seqs = [llm.add_request(prompt, params) for prompt, params in zip(PROMPTS, PARAMS)]
    with GenerationPanel(llm, seqs, enabled=True) as panel:
        llm.step()  # the prefill of the first 2 prompts (8 and 9 tokens): one 16-token block each
        panel.refresh()
        assert panel.bar.postfix == "batch 2 | KV 2/12 17% | running 2 waiting 3 finished 0/5 preempted 0"
        while not llm.is_finished():
            llm.step()
