"""`nvllm serve` as a user runs it: a process serving the tiny model on a free port answers /health and a
chat completion from the official `openai` client with `LLM.chat`'s greedy text; SIGTERM ends it with exit
code 0 within a bound, leaving no shared memory or semaphores behind; bad arguments are one clear line."""

import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import openai
import pytest

from nvllm import LLM, SamplingParams
from nvllm.cli import main
from tests.helpers.tp_exit_script import alive

ENGINE = ["enforce_eager=true", "max_num_seqs=4", "max_model_len=256"]
MESSAGES = [{"role": "user", "content": "Say something."}]
START_S, EXIT_S = 180, 30


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_healthy(url: str, process: subprocess.Popen, log) -> None:
    deadline = time.monotonic() + START_S
    while True:
        assert process.poll() is None, f"the server exited ({process.returncode}):\n{log.read_text()}"
        assert time.monotonic() < deadline, f"no /health within {START_S}s:\n{log.read_text()}"
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)


def shared_memory_of(pid: int) -> list[str]:
    return [name for name in os.listdir("/dev/shm") if str(pid) in name]


def children_of(pid: int) -> list[int]:
    children = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as stat:
                parent = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if parent == pid:
            children.append(int(entry))
    return children


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            return file.read().replace(b"\0", b" ").decode()
    except OSError:
        return "?"


def descendants_of(pid: int) -> list[int]:
    children = children_of(pid)
    return children + [grandchild for child in children for grandchild in descendants_of(child)]


@pytest.fixture(scope="module")
def expected() -> str:
    """`LLM.chat`'s greedy text, for every served configuration."""
    greedy = SamplingParams(temperature=0, max_tokens=6)
    with LLM("tiny", enforce_eager=True, max_num_seqs=4, max_model_len=256) as llm:
        return llm.chat(MESSAGES, greedy, use_tqdm=False)[0].outputs[0].text


@pytest.mark.parametrize("tensor_parallel_size, engine_process", [(1, False), (2, False), (2, True)])
def test_serve_answers_chat_and_exits_cleanly_on_sigterm(
    tmp_path, expected, tensor_parallel_size, engine_process
):
    """Tensor-parallel too: its workers and shared-memory channel must end with the server; with the engine
    in a process of its own, that process (the workers' parent) too."""
    engine = [*ENGINE, f"tensor_parallel_size={tensor_parallel_size}"]
    if not engine_process:  # the engine's own process is the default
        engine.append("--no-engine-process")
    port, log = free_port(), tmp_path / "server.log"
    # the options between the overrides, as users write them
    command = [sys.executable, "-m", "nvllm", "serve", "tiny", engine[0], "--port", str(port), *engine[1:]]
    with open(log, "w") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, process, log)
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused")
        out = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=6, temperature=0)
        assert out.choices[0].message.content == expected
        assert out.usage.completion_tokens == 6
        workers = descendants_of(process.pid) if engine_process else children_of(process.pid)
        assert len(workers) >= tensor_parallel_size - 1 + engine_process
        owners = [process.pid, *workers] if engine_process else [process.pid]  # who made the shared memory
        assert any(shared_memory_of(pid) for pid in owners) == (tensor_parallel_size > 1)
        process.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        returncode = process.wait(timeout=EXIT_S)
        assert time.monotonic() - sent < EXIT_S
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    text = log.read_text()
    assert returncode == 0, text
    assert "leaked" not in text and "Traceback" not in text, text  # the resource tracker's warnings
    assert not any(shared_memory_of(pid) for pid in owners)
    deadline = time.monotonic() + 10  # the resource tracker ends once it reads its parent's exit
    while [pid for pid in workers if alive(pid)]:
        assert time.monotonic() < deadline, (
            f"{[cmdline(pid) for pid in workers if alive(pid)]} outlived the server"
        )
        time.sleep(0.1)


def test_a_port_in_use_is_one_clear_line_before_the_model_loads(monkeypatch):
    monkeypatch.setattr("nvllm.serving.server.make_app", lambda *args, **kwargs: pytest.fail("model loaded"))
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(SystemExit, match=f"nvllm serve: cannot listen on 127.0.0.1:{port}: .*in use"):
            main(["serve", "tiny", "--port", str(port)])


@pytest.mark.parametrize(
    "args, words",
    [
        (["serve"], "required: model"),
        (["serve", "tiny", "max_num_seqs"], "'max_num_seqs' must be key=value"),
        (["serve", "tiny", "no_such_key=1"], "unknown LLM argument 'no_such_key'"),
        (["serve", "tiny", "--port", "http"], "invalid int value: 'http'"),
        (["serve", "tiny", "--port", "70000"], "70000 is no TCP port"),
    ],
)
def test_bad_arguments_are_one_clear_line(args, words, capsys):
    with pytest.raises(SystemExit) as ended:
        main(args)
    message = str(ended.value.code) + capsys.readouterr().err
    assert ended.value.code != 0 and words in message
