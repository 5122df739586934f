"""`bad_words`: words whose token sequences a request never samples, as vLLM defines them. A word of one
token is always masked (by `LogitBias`); a longer word's last token is masked at a step where the output so
far ends with the word's other tokens (`BadWords`, here).

The output's last tokens live on the device (`BadWords.recent`, updated with each step's tokens), so that
decode rounds stay several steps long and overlapped; each sequence keeps its row of the last batch's window
(`Sequence.bad_words_history`), as penalties keep their token history."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from nvllm.scheduler.sequence import Sequence
from nvllm.transfer import to_device

NO_TOKEN = -1  # a window position before the output's first token: equal to no word's token


def bad_words_token_ids(words: list[str], tokenizer) -> list[list[int]]:
    """Each word's tokens as it starts the text and, where a leading space makes other tokens of the same
    number (a word inside the text), those too: vLLM's rule."""
    token_ids = []
    for word in words:
        alone = tokenizer.encode(word.lstrip(), add_special_tokens=False)
        token_ids.append(alone)
        spaced = tokenizer.encode(" " + word.lstrip(), add_special_tokens=False)
        if spaced[0] != alone[0] and len(spaced) == len(alone):
            token_ids.append(spaced)
    return token_ids


def single_token_words(params) -> list[int]:
    """The tokens a request bans at every step: its bad words of one token."""
    return [ids[0] for ids in params.bad_words_token_ids or [] if len(ids) == 1]


def multi_token_words(params) -> list[list[int]]:
    return [ids for ids in params.bad_words_token_ids or [] if len(ids) > 1]


@dataclass
class BadWords:
    """Words of several tokens of rows `rows`, one entry per (row, word): word `w` bans token `last[w]` of
    logits row `rows[word_row[w]]` when that row's last output tokens equal `prefix[w]`, right-aligned
    (where `cares[w]`: a shorter prefix leaves the window's first positions out)."""

    rows: torch.Tensor  # [B] logits rows
    recent: torch.Tensor  # [B, H] each row's last H output tokens, NO_TOKEN before its first
    word_row: torch.Tensor  # [W] index into rows
    prefix: torch.Tensor  # [W, H]
    cares: torch.Tensor  # [W, H] bool
    last: torch.Tensor  # [W]

    def apply(self, logits: torch.Tensor) -> None:
        matches = ((self.recent[self.word_row] == self.prefix) | ~self.cares).all(1)
        banned = torch.where(matches, float("-inf"), 0.0)
        # accumulated: two words of a row may end in the same token, and any of them that matches bans it
        logits.index_put_((self.rows[self.word_row], self.last), banned, accumulate=True)

    def update(self, tokens: torch.Tensor, takes_step: torch.Tensor) -> None:
        """Shift each row's sampled token into its window (rows that sit the step out sampled none)."""
        shifted = torch.cat([self.recent[:, 1:], tokens[self.rows].unsqueeze(1)], dim=1)
        self.recent.copy_(torch.where(takes_step.unsqueeze(1), shifted, self.recent))


def bad_words(seqs: list[Sequence], from_host: bool, device) -> BadWords | None:
    """The rows of `seqs` with words of several tokens; their windows from the host's tokens in a prefill
    (the host has all of them then), else from the window the rounds before kept on the device."""
    rows = [row for row, seq in enumerate(seqs) if multi_token_words(seq.sampling_params)]
    if not rows:
        return None
    words = [multi_token_words(seqs[row].sampling_params) for row in rows]
    needs = [max(len(ids) for ids in row_words) - 1 for row_words in words]
    width = max(needs)
    if from_host:
        windows = [seqs[row].completion_token_ids[-width:] for row in rows]
        recent = to_device(torch.tensor([[NO_TOKEN] * (width - len(w)) + w for w in windows]), device)
    else:
        recent = torch.stack([_window(seqs[row].bad_words_history, width) for row in rows])
    word_row, prefix, cares, last = [], [], [], []
    for index, row_words in enumerate(words):
        for ids in row_words:
            padding = width - (len(ids) - 1)
            word_row.append(index)
            prefix.append([NO_TOKEN] * padding + ids[:-1])
            cares.append([False] * padding + [True] * (len(ids) - 1))
            last.append(ids[-1])
    found = BadWords(
        rows=to_device(torch.tensor(rows), device),
        recent=recent,
        word_row=to_device(torch.tensor(word_row), device),
        prefix=to_device(torch.tensor(prefix), device),
        cares=to_device(torch.tensor(cares), device),
        last=to_device(torch.tensor(last), device),
    )
    for index, row in enumerate(rows):
        seqs[row].bad_words_history = (found, index)
    return found


def _window(history: tuple[BadWords, int], width: int) -> torch.Tensor:
    """A sequence's last `width` output tokens from its row of an earlier batch's windows, whose width
    (that batch's longest word) may differ; positions that window did not hold are NO_TOKEN, and no word
    of this sequence reaches them."""
    earlier, index = history
    window = earlier.recent[index, -width:]
    missing = width - window.shape[0]
    return torch.cat([window.new_full((missing,), NO_TOKEN), window]) if missing > 0 else window


def release_bad_words_history(seq: Sequence) -> None:
    """The sequence stopped running: its window is rebuilt from the host's tokens if it is admitted again,
    and the batch tensors it points into are not kept alive by a finished sequence."""
    seq.bad_words_history = None
