"""The rules an engine follows while it serves, wherever its loop runs (a thread: AsyncEngine; a process of
its own: engine_child.py): how a request is admitted with a stream cursor per sample, how one is dropped,
and how long decode rounds are."""

from __future__ import annotations

from nvllm.engine.llm_engine import LLMEngine
from nvllm.engine.request_outputs import StreamCursor, attach_detokenizer
from nvllm.outputs import CompletionOutput
from nvllm.sampling_params import SamplingParams
from nvllm.scheduler.sequence import Sequence
from nvllm.serving.served_engine import ABORTED


def admit(
    engine: LLMEngine, prompt_token_ids: list[int], params: SamplingParams, priority: int
) -> tuple[list[Sequence], list[StreamCursor]]:
    """Queue a request (a bad one raises its ValueError, the engine unchanged); its samples (the sequence
    and its forks) and a cursor over each, whose deltas add up to its `generate` output."""
    seq = engine.add_request(prompt_token_ids, params, priority)
    samples = [seq, *seq.forks]
    cursors = []
    for index, member in enumerate(samples):
        if member.detokenizer is None:
            attach_detokenizer(member, engine.tokenizer)
        cursors.append(StreamCursor(member, index))
    return samples, cursors


def drop(engine: LLMEngine, samples: list[Sequence], cursors: list[StreamCursor]) -> list[CompletionOutput]:
    """Abort a request (its KV blocks and token-table rows free on return); the last delta of each sample
    that had not ended: no tokens, finish reason "abort"."""
    engine.abort(samples)
    ends = []
    for cursor in cursors:
        if not cursor.done:
            cursor.done = True
            ends.append(CompletionOutput(cursor.index, "", [], finish_reason=ABORTED))
    return ends


def serve_step(engine: LLMEngine, streaming: bool) -> Exception | None:
    """One step; while any streaming request runs (`streaming`), one model step's tokens, so that they leave
    as they are sampled (`LLMEngine.set_streaming`), otherwise a whole decode round's. A step that raised
    drops every request (the engine stays usable, the server runs on) and its error is returned for the
    caller to fail them with."""
    engine.set_streaming(streaming)
    try:
        engine.step()
    except Exception as error:  # noqa: BLE001 - a failed step fails its requests, not the server
        engine.abort_all()
        return error
    return None
