"""Incremental detokenization: a completion's text grown token by token, and its stop strings.

Byte-level BPE tokens can end inside a multi-byte character: decoding such a prefix ends in U+FFFD, which the
next token may turn into a real character. Text is emitted only up to a token where it does not end so, and
each step decodes a window of a few tokens, never the whole output: the `tokenizers` library's `DecodeStream`
does that window's bookkeeping and decoding in one call a token, and where it cannot (byte-fallback tokens
that make no character can change the text its window starts with, and it then raises) the windows are
decoded here from that token on. The concatenated text equals `tokenizer.decode` of all the tokens (`finish`
releases what is still held at the end). Special tokens decode to no text where `skip_special_tokens`
(vLLM's default): one that adds no text completes at once with "".
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from tokenizers.decoders import DecodeStream

if TYPE_CHECKING:
    from nvllm.tokenizer.tokenizer import Tokenizer

REPLACEMENT_CHARACTER = "\ufffd"


def decode(tokenizer: Tokenizer, token_ids: list[int], skip_special_tokens: bool) -> str:
    """The one decoding rule of completions (the incremental one below agrees with it): the tokens marked
    special left out where `skip_special_tokens`. The tokenizer is a fast (byte-level) one, whose decoder
    puts no spaces between special tokens: `spaces_between_special_tokens` changes nothing here, as in
    vLLM's fast detokenizer."""
    return tokenizer.decode(token_ids, skip_special_tokens=skip_special_tokens)


class IncrementalDetokenizer:
    """The text of `token_ids` as they are `add`ed, and the stop strings found in it. `text` is cut before the
    stop string that ends first (after it with `include_stop`); `stop_reason` is then that string."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        stop_strings: list[str] = (),
        include_stop: bool = False,
        *,
        skip_special_tokens: bool,
    ):
        self.tokenizer, self.skip_special_tokens = tokenizer, skip_special_tokens
        self.token_ids: list[int] = []
        # the window's bookkeeping and decoding in one call a token; None once it has failed (`_added_text`)
        self._stream: DecodeStream | None = DecodeStream(skip_special_tokens=skip_special_tokens)
        self.prefix_offset = 0  # the window `finish` decodes starts here: the last completed token's start
        self.read_offset = 0  # the tokens before this one are in `text`
        self.text = ""
        self.stop_strings, self.include_stop = list(stop_strings), include_stop
        self.stop_reason: str | None = None
        # streaming holds back this many characters: they could start a stop string that would be cut
        self.held_back = 0 if include_stop or not stop_strings else max(map(len, stop_strings)) - 1
        self.num_streamed = self.num_streamed_tokens = 0  # characters of `text` and tokens `new_text` gave
        # (tokens, characters of `text`) where a token's text ends: streaming hands text out at these only,
        # so that a delta's text is that of its tokens
        self.token_ends: deque[tuple[int, int]] = deque()

    def add(self, token_id: int, check_stop: bool = True) -> bool:
        """Append one token; True when it completed a stop string (`check_stop`: look for one in the text
        it added)."""
        self.token_ids.append(token_id)
        added = self._added_text(token_id)
        if added is None:
            return False  # wait for the token that ends the character
        text, self.text = self.text, ""  # the only reference left: CPython grows it in place, not copied
        start = len(text)
        text += added
        self.text = text
        self.prefix_offset, self.read_offset = self.read_offset, len(self.token_ids)
        self.token_ends.append((len(self.token_ids), len(self.text)))
        return check_stop and self._find_stop(start)

    def _added_text(self, token_id: int) -> str | None:
        """The text the token just appended adds, or None while it leaves a character unfinished."""
        if self._stream is not None:
            try:
                added = self._stream.step(self.tokenizer.backend, token_id)
            except Exception:  # noqa: BLE001 - tokenizers raises a bare Exception for it
                # the window's text no longer starts with the text so far: decoders that strip or
                # byte-fallback tokenizers can do that; from here on the windows are decoded here
                self._stream = None
            else:
                if added is not None:
                    return added
                if self.read_offset < len(self.token_ids) - 1 or self._decode([token_id]):
                    return None  # a character left unfinished
                return ""  # a skipped special token after complete text: complete, with no text
        window_start = self._decode(self.token_ids[self.prefix_offset : self.read_offset])
        window = self._decode(self.token_ids[self.prefix_offset :])
        if window.endswith(REPLACEMENT_CHARACTER):
            return None
        return window[len(window_start) :]

    def _decode(self, token_ids: list[int]) -> str:
        return decode(self.tokenizer, token_ids, self.skip_special_tokens)

    def _find_stop(self, new_from: int) -> bool:
        """Cut `text` at the stop string that ends first in its characters from `new_from` on (as vLLM does;
        of two ending together, the one that starts first)."""
        found = None
        for stop in self.stop_strings:
            position = self.text.find(stop, max(0, new_from - len(stop) + 1))
            if position >= 0 and (found is None or (position + len(stop), position) < found[0]):
                found = ((position + len(stop), position), stop)
        if found is None:
            return False
        (_, position), self.stop_reason = found
        self.text = self.text[: position + len(self.stop_reason) if self.include_stop else position]
        self.held_back = 0
        return True

    def finish(self) -> None:
        """The output is complete: text still held for an unfinished character is released (as U+FFFD),
        as is any held back for stop strings."""
        if self.stop_reason is None and self.read_offset < len(self.token_ids):
            window_start = self._decode(self.token_ids[self.prefix_offset : self.read_offset])
            self.text += self._decode(self.token_ids[self.prefix_offset :])[len(window_start) :]
            self.read_offset = len(self.token_ids)
        self.held_back = 0
        self.token_ends = deque([(len(self.token_ids), len(self.text))])  # the rest goes out at once

    def new_text(self) -> str:
        """The text not handed out before, up to the end of a token's text and less what is held back
        (`num_streamed_tokens`: the tokens whose text has then been handed out)."""
        end = self.num_streamed
        while self.token_ends and self.token_ends[0][1] <= len(self.text) - self.held_back:
            self.num_streamed_tokens, end = self.token_ends.popleft()
        delta, self.num_streamed = self.text[self.num_streamed : end], end
        return delta
