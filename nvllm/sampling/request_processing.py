"""The sampler's per-request processing of one launched batch (`RequestProcessing`), from its sequences:
None when no request of the batch asks for penalties, `min_tokens`, `min_p`, logit biases, allowed tokens,
bad words or log-probabilities, so that the other batches sample as they would without these features."""

from __future__ import annotations

import torch

from nvllm.sampling.bad_words import BadWords, bad_words
from nvllm.sampling.logit_bias import logit_bias
from nvllm.sampling.logits_processors import Logprobs, MinP, MinTokens, Penalties, RequestProcessing
from nvllm.sampling_params import SamplingParams
from nvllm.scheduler.sequence import Sequence
from nvllm.transfer import to_device


def request_processing(
    seqs: list[Sequence],
    num_steps: list[int] | None,
    vocab_size: int,
    eos_token_ids: tuple[int, ...],
    device: torch.device | str,
    inv_temperatures: torch.Tensor,
) -> RequestProcessing | None:
    """For the sampled sequences `seqs` of a batch (a decode round of `num_steps` steps per sequence, or
    a prefill: None), whose rows sample at `inv_temperatures` (needed where a row asks for min_p)."""
    params = [seq.sampling_params for seq in seqs]
    if not any(map(_asks_for_processing, params)):
        return None
    penalised = [row for row, p in enumerate(params) if p.has_penalties]
    min_tokens = _min_tokens(seqs, eos_token_ids, vocab_size, device)
    num_top = [p.num_logprobs(vocab_size) for p in params if p.logprobs is not None]
    bias = logit_bias(params, vocab_size, device)
    words = bad_words(seqs, num_steps is None, device)
    min_p = _min_p(params, inv_temperatures, device)
    if not penalised and not num_top and all(part is None for part in (min_tokens, bias, words, min_p)):
        return None
    penalties = _penalties(seqs, penalised, num_steps is None, vocab_size, device) if penalised else None
    return RequestProcessing(
        penalties=penalties,
        min_tokens=min_tokens,
        logprobs=Logprobs(max(num_top)) if num_top else None,
        num_steps=_steps_of(num_steps, penalties),
        logit_bias=bias,
        bad_words=words,
        bad_words_num_steps=_steps_of(num_steps, words),
        min_p=min_p,
    )


def _asks_for_processing(params: SamplingParams) -> bool:
    return bool(
        params.has_penalties
        or params.min_tokens
        or params.logprobs is not None
        or params.min_p
        or params.filters_tokens
    )


def _steps_of(num_steps: list[int] | None, part: Penalties | BadWords | None) -> torch.Tensor | None:
    """The decode round's steps of each of `part`'s rows (None: a prefill, or no such rows)."""
    if part is None or num_steps is None:
        return None
    return to_device(torch.tensor(num_steps), part.rows.device)[part.rows]


def _min_p(params, inv_temperatures: torch.Tensor, device) -> MinP | None:
    """The sampled (not greedy) rows with a min_p: a greedy row's argmax is the token min_p keeps anyway."""
    rows = [row for row, p in enumerate(params) if p.min_p > 0 and not p.is_greedy]
    if not rows:
        return None
    rows_on_device = to_device(torch.tensor(rows), device)
    return MinP(
        rows=rows_on_device,
        min_p=to_device(torch.tensor([params[row].min_p for row in rows], dtype=torch.float32), device),
        inv_temperatures=inv_temperatures[rows_on_device],
    )


def _min_tokens(seqs: list[Sequence], eos_token_ids: tuple[int, ...], vocab_size: int, device):
    """Rows that may not stop yet: fewer output tokens (on the device, the launched rounds' included) than
    their `min_tokens`, and a stop token to suppress (a `MinTokens`, or None: no such row)."""
    rows, stop_ids, tokens_before_stop = [], [], []
    for row, seq in enumerate(seqs):
        params = seq.sampling_params
        left = params.min_tokens - (seq.device_len - seq.num_prompt_tokens)
        ids = ([] if params.ignore_eos else list(eos_token_ids)) + (params.stop_token_ids or [])
        ids = [token for token in ids if token < vocab_size]  # an EOS past a small test vocabulary
        if left > 0 and ids:
            rows.append(row)
            stop_ids.append(ids)
            tokens_before_stop.append(left)
    if not rows:
        return None
    width = max(map(len, stop_ids))
    padded = [ids + [ids[0]] * (width - len(ids)) for ids in stop_ids]
    return MinTokens(
        rows=to_device(torch.tensor(rows), device),
        stop_ids=to_device(torch.tensor(padded), device),
        tokens_before_stop=to_device(torch.tensor(tokens_before_stop), device),
    )


def _penalties(seqs: list[Sequence], rows: list[int], from_host: bool, vocab_size: int, device) -> Penalties:
    """The penalised rows' token histories: from the host's tokens in a prefill (the host has all of them
    then, a preempted sequence's output too), else from the history the rounds before kept on the device.
    Each sequence then keeps its row of this batch's history as its own."""
    if from_host:
        seen = torch.zeros(len(rows), vocab_size, dtype=torch.bool)
        counts = torch.zeros(len(rows), vocab_size, dtype=torch.float32)
        for index, row in enumerate(rows):
            seq = seqs[row]
            seen[index, seq.token_ids] = True
            completion = torch.tensor(seq.completion_token_ids, dtype=torch.int64)
            counts[index] = torch.bincount(completion, minlength=vocab_size).float()
        seen, counts = to_device(seen, device), to_device(counts, device)
    else:
        histories = [seqs[row].penalty_history for row in rows]
        seen = torch.stack([history.seen[index] for history, index in histories])
        counts = torch.stack([history.counts[index] for history, index in histories])

    def per_row(name: str) -> torch.Tensor:
        values = [getattr(seqs[row].sampling_params, name) for row in rows]
        return to_device(torch.tensor(values, dtype=torch.float32), device)

    penalties = Penalties(
        rows=to_device(torch.tensor(rows), device),
        seen=seen,
        counts=counts,
        presence=per_row("presence_penalty"),
        frequency=per_row("frequency_penalty"),
        repetition=per_row("repetition_penalty"),
    )
    for index, row in enumerate(rows):
        seqs[row].penalty_history = (penalties, index)
    return penalties


def release_penalty_history(seq: Sequence) -> None:
    """The sequence stopped running: its history is rebuilt from the host's tokens if it is admitted again,
    and the batch tensors it points into are not kept alive by a finished sequence."""
    seq.penalty_history = None
