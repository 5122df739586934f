"""One engine, one owner at a time: calls from several threads run one after another or are refused with an
error that says why, never deadlock and never give wrong outputs; a shut-down engine says so; a step that
failed part-way is not stepped over."""

import threading

import pytest

from nvllm import SamplingParams
from tests.helpers.engine_utils import random_prompt, tiny_llm

pytestmark = pytest.mark.usefixtures("engine_left_idle")

PROMPTS = [random_prompt(6, seed=700), random_prompt(4, seed=701)]
GREEDY = SamplingParams(temperature=0, max_tokens=6)
STREAM_ERROR = "a stream of this engine is still being iterated"
JOIN_S = 60


@pytest.fixture(scope="module")
def llm():
    with tiny_llm(num_decode_steps=2) as engine:
        yield engine


@pytest.fixture(scope="module")
def expected(llm):
    return llm.generate(PROMPTS, GREEDY, use_tqdm=False)


def run_in_thread(target) -> dict:
    """`target()` on another thread, joined: its result or its exception, and whether it ended."""
    outcome = {}

    def body():
        try:
            outcome["result"] = target()
        except BaseException as error:
            outcome["error"] = error

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    thread.join(JOIN_S)
    outcome["ended"] = not thread.is_alive()
    return outcome


def test_a_stream_continued_on_another_thread_refuses_generate_inside_its_loop(llm, expected):
    stream = llm.stream(PROMPTS, GREEDY)
    next(stream)

    def continue_and_generate():
        next(stream)
        return llm.generate(PROMPTS, GREEDY, use_tqdm=False)

    outcome = run_in_thread(continue_and_generate)
    assert outcome["ended"], "generate inside a stream's loop deadlocked"
    assert STREAM_ERROR in str(outcome["error"])
    stream.close()
    assert llm.generate(PROMPTS, GREEDY, use_tqdm=False) == expected


def test_a_stream_handed_to_another_thread_makes_the_first_thread_wait_not_fail(llm, expected):
    stream = llm.stream(PROMPTS, GREEDY)
    next(stream)
    resumed = threading.Event()
    streamed = []

    def finish_stream():
        for item in stream:
            resumed.set()
            streamed.append(item)
        resumed.set()

    thread = threading.Thread(target=finish_stream, daemon=True)
    thread.start()
    assert resumed.wait(JOIN_S)
    assert llm.generate(PROMPTS, GREEDY, use_tqdm=False) == expected  # waits for the stream to end
    thread.join(JOIN_S)
    assert streamed


def test_hand_written_requests_are_not_mixed_into_another_threads_generate(llm, expected):
    seqs = [llm.add_request(prompt, GREEDY) for prompt in PROMPTS]
    outcome = run_in_thread(lambda: llm.generate(PROMPTS, GREEDY, use_tqdm=False))
    assert outcome["ended"]
    assert "add_request" in str(outcome["error"])  # refused: it would have run and dropped them
    while not llm.is_finished():
        llm.step()
    assert [seq.completion_token_ids for seq in seqs] == [out.outputs[0].token_ids for out in expected]


def generate_held_on_the_device(llm, release: threading.Event) -> tuple[dict, threading.Thread]:
    """A `generate` on another thread, held inside its first step until `release` is set: its outputs go to
    the returned dict's "out"."""
    started = threading.Event()
    execute = llm.model_runner.execute

    def slow_execute(*args, **kwargs):
        started.set()
        release.wait(JOIN_S)
        return execute(*args, **kwargs)

    llm.model_runner.execute = slow_execute
    results = {}
    thread = threading.Thread(
        target=lambda: results.update(out=llm.generate(PROMPTS, GREEDY, use_tqdm=False)), daemon=True
    )
    thread.start()
    assert started.wait(JOIN_S)
    return results, thread


def test_add_request_and_step_wait_for_another_threads_generate(llm, expected):
    release = threading.Event()
    try:
        results, thread = generate_held_on_the_device(llm, release)
        added = {}
        adder = threading.Thread(target=lambda: added.update(seq=llm.add_request(PROMPTS[0], GREEDY)))
        adder.start()
        adder.join(0.5)
        assert adder.is_alive(), "add_request ran in the middle of another thread's generate"
        release.set()
        thread.join(JOIN_S)
        adder.join(JOIN_S)
    finally:
        del llm.model_runner.execute
    assert results["out"] == expected
    while not llm.is_finished():
        llm.step()
    assert added["seq"].completion_token_ids == expected[0].outputs[0].token_ids


def test_a_step_that_failed_part_way_is_refused_until_abort_all(llm, expected, monkeypatch):
    for prompt in PROMPTS:
        llm.add_request(prompt, GREEDY)
    llm.step()  # the prefill: both running
    postprocess = llm.scheduler.postprocess

    def fails_after_the_device_ran(*args):
        raise RuntimeError("injected failure")

    monkeypatch.setattr(llm.scheduler, "postprocess", fails_after_the_device_ran)
    with pytest.raises(RuntimeError, match="injected failure"):
        llm.step()
    monkeypatch.setattr(llm.scheduler, "postprocess", postprocess)
    with pytest.raises(RuntimeError, match="abort_all"):
        llm.step()
    llm.abort_all()
    assert llm.is_finished()
    assert llm.generate(PROMPTS, GREEDY, use_tqdm=False) == expected


def test_shutdown_from_another_thread_waits_for_generate_then_calls_say_shut_down(expected):
    engine = tiny_llm(num_decode_steps=2)
    release = threading.Event()
    results, thread = generate_held_on_the_device(engine, release)
    stopper = threading.Thread(target=engine.shutdown, daemon=True)
    stopper.start()
    stopper.join(0.5)
    assert stopper.is_alive(), "shutdown did not wait for the generate in flight"
    release.set()
    thread.join(JOIN_S)
    stopper.join(JOIN_S)
    assert results["out"] == expected
    for call in (
        lambda: engine.generate(PROMPTS, GREEDY, use_tqdm=False),
        lambda: list(engine.stream(PROMPTS, GREEDY)),
        lambda: engine.add_request(PROMPTS[0], GREEDY),
        engine.step,
    ):
        with pytest.raises(RuntimeError, match="the engine is shut down"):
            call()
    engine.shutdown()  # again: nothing to do


def test_shutdown_inside_a_stream_loop_ends_the_stream(expected):
    with tiny_llm(num_decode_steps=2) as engine:
        stream = engine.stream(PROMPTS, GREEDY)
        next(stream)
        engine.shutdown()
        with pytest.raises(RuntimeError, match="the engine is shut down"):
            next(stream)
