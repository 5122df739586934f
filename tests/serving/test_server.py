"""The OpenAI server, with the official `openai` client against uvicorn serving the tiny model on a local
port, its engine on a thread or in a process of its own: greedy completions and chat equal `generate` and
`chat`, streamed or not; n, stop, logprobs; eight concurrent clients; a client that leaves mid-stream frees
its blocks; bad requests get OpenAI's errors; the same greedy text before and after all of it."""

import asyncio
import time

import httpx
import openai
import pytest
from fastapi.testclient import TestClient

from nvllm import LLM
from nvllm.engine.config_resolution import engine_config
from nvllm.sampling_params import SamplingParams
from nvllm.serving.app import build_app
from nvllm.serving.async_engine import AsyncEngine
from nvllm.serving.engine_process import EngineProcess
from nvllm.serving.metrics import ServerMetrics
from nvllm.serving.server import background_server
from tests.helpers.tp_exit_script import alive

PROMPTS = ["The capital of France is", "One, two, three,", "def main():", "Hello"]
MESSAGES = [{"role": "user", "content": "Say something."}]
MAX_TOKENS = 8
# vLLM's error types, by status
ERROR_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    404: "NotFoundError",
    413: "BadRequestError",
}
ENGINE = {"enforce_eager": True, "max_num_seqs": 8}
ALLOWED = [3, 50, 999, 4000]
FORCED = 7


def filter_cases(llm: LLM, greedy_ids: list[int]) -> dict[str, tuple[dict, SamplingParams]]:
    """Each token filter as a request body's fields and as the SamplingParams `generate` gets: seeded
    sampling, so that the filter decides what differs. The bad word is a token of the greedy output (as
    it starts a text), so that banning it changes that output."""
    seeded = {"temperature": 1.0, "seed": 3}
    bad_word = llm.tokenizer.decode([greedy_ids[1]])
    fields = {
        "min_p": {**seeded, "min_p": 0.2},
        "logit_bias": {**seeded, "logit_bias": {FORCED: 100}},
        "allowed_token_ids": {**seeded, "allowed_token_ids": ALLOWED},
        "bad_words": {"temperature": 0, "bad_words": [bad_word]},
    }
    cases = {name: (body, SamplingParams(max_tokens=MAX_TOKENS, **body)) for name, body in fields.items()}
    cases["logit_bias"][0]["logit_bias"] = {str(FORCED): 100}  # JSON's keys: strings, as OpenAI sends them
    return cases


@pytest.fixture(scope="module", params=["engine thread", "engine process"])
def served(request):
    """The server with its engine on a thread of this process (AsyncEngine) or in a process of its own
    (EngineProcess), the expected texts from an engine of the same arguments here."""
    llm = LLM("tiny", **ENGINE)
    greedy = SamplingParams(temperature=0, max_tokens=MAX_TOKENS)
    expected = [out.outputs[0].text for out in llm.generate(PROMPTS, greedy, use_tqdm=False)]
    expected_chat = llm.chat(MESSAGES, greedy, use_tqdm=False)[0].outputs[0].text
    greedy_ids = llm.generate(PROMPTS[:1], greedy, use_tqdm=False)[0].outputs[0].token_ids
    filtered = {}
    for name, (body, params) in filter_cases(llm, greedy_ids).items():
        output = llm.generate(PROMPTS[:1], params, use_tqdm=False)[0].outputs[0]
        filtered[name] = (body, output.token_ids, output.text)
    if request.param == "engine process":
        llm.shutdown()
        engine = EngineProcess(engine_config("tiny", **ENGINE))
    else:
        engine = AsyncEngine(llm)
    metrics = ServerMetrics(engine.stats)
    engine.on_finished = metrics.request_finished
    app = build_app(engine, metrics, "tiny", max_body_bytes=20_000)
    with background_server(app) as url:
        yield url, expected, expected_chat, engine, metrics, filtered
    assert llm.model_runner is None  # the app's shutdown released the engine
    if request.param == "engine process":
        assert not alive(engine.pid)  # and stopped its process


@pytest.fixture(scope="module")
def client(served):
    return openai.OpenAI(base_url=served[0] + "/v1", api_key="unused")


def greedy_text(client, prompt: str, **extra) -> str:
    out = client.completions.create(
        model="tiny", prompt=prompt, max_tokens=MAX_TOKENS, temperature=0, **extra
    )
    return out.choices[0].text


def test_completion_and_stream_equal_generate(served, client):
    expected = served[1]
    assert greedy_text(client, PROMPTS[0]) == expected[0]
    chunks = client.completions.create(
        model="tiny", prompt=PROMPTS[1], max_tokens=MAX_TOKENS, temperature=0, stream=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    chunks = list(chunks)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == expected[1]
    assert chunks[-1].usage.completion_tokens == MAX_TOKENS


def test_chat_and_stream_equal_llm_chat(served, client):
    expected_chat = served[2]
    out = client.chat.completions.create(
        model="tiny", messages=MESSAGES, max_tokens=MAX_TOKENS, temperature=0
    )
    assert out.choices[0].message.content == expected_chat
    stream = client.chat.completions.create(
        model="tiny", messages=MESSAGES, max_tokens=MAX_TOKENS, temperature=0, stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream) == expected_chat


def test_n_stop_and_logprobs(served, client):
    out = client.completions.create(model="tiny", prompt="Hi", max_tokens=4, n=3, seed=1, temperature=1)
    assert sorted(c.index for c in out.choices) == [0, 1, 2]
    expected = served[1][0]
    stop = expected[3:6]
    assert greedy_text(client, PROMPTS[0], stop=[stop]) == expected[: expected.index(stop)]
    out = client.completions.create(model="tiny", prompt=PROMPTS[0], max_tokens=3, temperature=0, logprobs=2)
    logprobs = out.choices[0].logprobs
    assert len(logprobs.tokens) == 3 and all(len(top) == 2 for top in logprobs.top_logprobs)
    assert all(lp == max(top.values()) for lp, top in zip(logprobs.token_logprobs, logprobs.top_logprobs))
    streamed = client.completions.create(
        model="tiny", prompt=PROMPTS[0], max_tokens=3, temperature=0, logprobs=2, stream=True
    )
    pieces = [chunk.choices[0].logprobs for chunk in streamed if chunk.choices and chunk.choices[0].logprobs]
    # the chunks' logprobs (each token's text offset from the completion's start) add up to the whole's
    for field in ("tokens", "token_logprobs", "text_offset"):
        joined = [value for piece in pieces for value in getattr(piece, field)]
        assert joined == getattr(logprobs, field), field
    chat = client.chat.completions.create(
        model="tiny", messages=MESSAGES, max_tokens=2, temperature=0, logprobs=True, top_logprobs=3
    )
    assert [len(t.top_logprobs) for t in chat.choices[0].logprobs.content] == [3, 3]


def test_token_filters_equal_generate_with_the_same_sampling_params(served, client):
    filtered = served[5]
    assert filtered["logit_bias"][1] == [FORCED] * MAX_TOKENS  # +100 forces its token
    assert set(filtered["allowed_token_ids"][1]) <= set(ALLOWED)
    assert filtered["bad_words"][2] != served[1][0]  # the banned word changed the greedy text
    for name, (body, _, text) in filtered.items():
        out = client.completions.create(
            model="tiny", prompt=PROMPTS[0], max_tokens=MAX_TOKENS, extra_body=body
        )
        assert out.choices[0].text == text, name


def test_eight_concurrent_clients(served):
    url, expected = served[0], served[1]
    aclient = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused")

    async def one(prompt: str, stream: bool) -> str:
        args = dict(model="tiny", prompt=prompt, max_tokens=MAX_TOKENS, temperature=0)
        if not stream:
            return (await aclient.completions.create(**args)).choices[0].text
        return "".join(
            [c.choices[0].text async for c in await aclient.completions.create(**args, stream=True)]
        )

    async def main():
        return await asyncio.gather(*(one(PROMPTS[i % 4], stream=i < 4) for i in range(8)))

    assert asyncio.run(main()) == [expected[i % 4] for i in range(8)]


def metric(url: str, name: str) -> float:
    lines = httpx.get(url + "/metrics").text.splitlines()
    return float(next(line.split()[1] for line in lines if line.startswith(name + " ")))


def test_a_client_leaving_mid_stream_frees_its_blocks(served):
    url = served[0]
    body = {
        "model": "tiny",
        "prompt": "Long story:",
        "max_tokens": 100_000,
        "ignore_eos": True,
        "stream": True,
    }
    with httpx.stream("POST", url + "/v1/completions", json=body) as response:
        lines = response.iter_lines()
        assert next(lines).startswith("data: ")
        assert metric(url, "nvllm_kv_blocks_used") > 0
    deadline = time.time() + 20
    while metric(url, "nvllm_num_requests_running") or metric(url, "nvllm_kv_blocks_used"):
        assert time.time() < deadline, "the request of a client that left still runs"
        time.sleep(0.1)


def assert_openai_error(response: httpx.Response, status: int, words: str) -> None:
    assert response.status_code == status
    error = response.json()["error"]
    assert words in error["message"]
    assert (error["code"], error["type"]) == (status, ERROR_TYPES[status])
    assert error["param"] is None


# the app refuses these before the engine sees them: the same with either engine, so against one
@pytest.mark.parametrize("served", ["engine thread"], indirect=True)
@pytest.mark.parametrize(
    "body, status, words",
    [
        ({"model": "gpt-4", "prompt": "x"}, 404, "does not exist"),
        ({"prompt": "x", "temperature": -1}, 400, "temperature"),
        ({"prompt": "x", "best_of": 2}, 400, "best_of"),
        ({"prompt": "x" * 30_000}, 413, "exceeds the limit"),
        ({"prompt": "x", "stream": "yes"}, 400, "stream"),
    ],
)
def test_bad_requests_get_openai_errors(served, body, status, words):
    assert_openai_error(httpx.post(served[0] + "/v1/completions", json=body), status, words)


def test_a_prompt_over_max_model_len_gets_an_openai_error(served):
    """The engine refuses it (in its own process, the child's ValueError): with either engine."""
    response = httpx.post(served[0] + "/v1/completions", json={"prompt": "x " * 5000})
    assert_openai_error(response, 400, "max_model_len")


def test_malformed_json_and_models(served, client):
    response = httpx.post(served[0] + "/v1/completions", content=b"{not json")
    assert response.status_code == 400 and "malformed JSON" in response.json()["error"]["message"]
    response = httpx.post(served[0] + "/v1/chat/completions", json=[{"messages": MESSAGES}])
    assert response.status_code == 400 and "must be a JSON object" in response.json()["error"]["message"]
    with pytest.raises(openai.BadRequestError, match="messages"):
        client.chat.completions.create(model="tiny", messages="hello")
    assert [model.id for model in client.models.list()] == ["tiny"]
    assert httpx.get(served[0] + "/health").status_code == 200


@pytest.mark.parametrize("served", ["engine thread"], indirect=True)  # the app's guard, before any engine
def test_api_key(served):
    guarded = build_app(served[3], served[4], "tiny", api_key="secret")
    web = TestClient(guarded)  # no lifespan: the served engine stays up
    refused = web.get("/v1/models")
    assert refused.status_code == 401
    error = refused.json()["error"]
    assert error["type"] == ERROR_TYPES[401] and "API key" in error["message"]
    assert web.get("/v1/models", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert web.get("/v1/models", headers={"Authorization": "Bearer secret"}).status_code == 200
    assert web.get("/health").status_code == 200


def test_same_greedy_text_after_everything(served, client):
    assert [greedy_text(client, prompt) for prompt in PROMPTS] == served[1]
