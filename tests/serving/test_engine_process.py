"""The engine in a process of its own (EngineProcess): an abort's future is done once the child freed the
request's blocks; a bad request's ValueError raised in the child reaches the caller; a child that is killed
fails the running request with a clear error and the server answers 503 after; shutdown, or the
interpreter's exit without it, leaves no process behind."""

import asyncio
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from nvllm.engine.config_resolution import engine_config
from nvllm.sampling_params import SamplingParams
from nvllm.serving.app import build_app
from nvllm.serving.engine_process import EngineProcess
from nvllm.serving.metrics import ServerMetrics
from nvllm.serving.served_engine import ABORTED
from nvllm.serving.server import background_server
from tests.helpers.tp_exit_script import alive

ENGINE = {"enforce_eager": True, "max_num_seqs": 4, "max_model_len": 256}
LONG = SamplingParams(temperature=0, max_tokens=200, ignore_eos=True)


def config():
    return engine_config("tiny", **ENGINE)


@pytest.fixture(scope="module")
def engine():
    served = EngineProcess(config())
    yield served
    served.shutdown()
    assert not alive(served.pid)


def test_abort_is_done_once_the_child_freed_the_blocks(engine):
    async def main():
        request = await engine.add_request([1, 2, 3, 4, 5], LONG)
        deltas = request.deltas()
        first = await anext(deltas)
        assert first.token_ids and engine.stats().kv_blocks_used > 0
        await engine.abort(request.request_id)
        stats = engine.stats()
        assert (stats.running, stats.waiting, stats.kv_blocks_used) == (0, 0, 0)
        assert stats.kv_blocks_total > 0
        rest = [delta async for delta in deltas]
        return rest[-1].finish_reason

    assert asyncio.run(main()) == ABORTED
    assert engine.num_active == 0


def test_a_bad_request_raises_the_childs_value_error(engine):
    too_long = list(range(1, 300))  # no check in this process: the child's engine refuses it

    async def main():
        with pytest.raises(ValueError, match="max_model_len"):
            await engine.add_request(too_long, SamplingParams(max_tokens=4))
        request = await engine.add_request([1, 2, 3], SamplingParams(temperature=0, max_tokens=4))
        return [token async for delta in request.deltas() for token in delta.token_ids]

    assert len(asyncio.run(main())) == 4  # the engine serves on
    assert engine.num_active == 0


def test_a_killed_engine_process_fails_its_request_and_the_server_answers_503():
    served = EngineProcess(config())
    app = build_app(served, ServerMetrics(served.stats), "tiny")
    body = {"model": "tiny", "prompt": "Long story:", "max_tokens": 100_000, "ignore_eos": True}
    with background_server(app) as url:
        with httpx.stream("POST", url + "/v1/completions", json={**body, "stream": True}) as response:
            lines = response.iter_lines()
            assert next(lines).startswith("data: ")
            os.kill(served.pid, signal.SIGKILL)
            rest = "\n".join(lines)
        assert "generation failed: the engine's process ended (exit code -9)" in rest
        response = httpx.post(url + "/v1/completions", json={**body, "max_tokens": 2})
        assert response.status_code == 503
        assert "the engine's process ended" in response.json()["error"]["message"]
        assert httpx.get(url + "/health").status_code == 503
    assert served.num_active == 0


EXIT_SCRIPT = """
from nvllm.engine.config_resolution import engine_config
from nvllm.serving.engine_process import EngineProcess
engine = EngineProcess(engine_config("tiny", enforce_eager=True, max_model_len=256))
print(engine.pid, flush=True)
"""


def test_the_interpreters_exit_without_shutdown_stops_the_engine_process():
    done = subprocess.run(
        [sys.executable, "-c", EXIT_SCRIPT], capture_output=True, text=True, timeout=120, cwd=os.getcwd()
    )
    assert done.returncode == 0, done.stderr
    assert "leaked" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    pid = int(done.stdout.split()[-1])
    deadline = time.monotonic() + 10
    while alive(pid):
        assert time.monotonic() < deadline, "the engine's process outlived the server's"
        time.sleep(0.1)
