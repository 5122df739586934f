"""What a serving engine's loop pays on the host after each step for its streams, without a model: every
stream's delta (its new token and text, `StreamCursor.delta`) and the step's message pickled for the pipe to
the server (what the engine process's outbox thread does, holding the interpreter): the host work beside
each step that `generate` does not do, which above saturation competes with a small model's steps.

    python -m experiments.studies.stream_deltas [--streams 512] [--steps 64] [--tokens-in 960]
"""

from __future__ import annotations

import argparse
import pickle
import random
import time

from nvllm.engine.request_outputs import StreamCursor, attach_detokenizer
from nvllm.sampling_params import SamplingParams
from nvllm.scheduler.sequence import Sequence
from nvllm.tokenizer.tokenizer import load_tokenizer

PROMPT_LEN = 300


def stream_step_costs(num_streams: int, num_steps: int, tokens_in: int, seed: int = 0) -> dict[str, float]:
    """Mean host seconds a step for `num_streams` streams of random tokens (the text of a random-weight
    model), each already `tokens_in` tokens into its output: their deltas, and the step's message pickled."""
    tokenizer = load_tokenizer(None)
    rng = random.Random(seed)
    vocab = len(tokenizer)
    params = SamplingParams(max_tokens=tokens_in + num_steps + 1, ignore_eos=True)
    seqs, cursors = [], []
    for _ in range(num_streams):
        seq = Sequence([rng.randrange(vocab) for _ in range(PROMPT_LEN)], params, 0)
        attach_detokenizer(seq, tokenizer)
        seq.token_ids.extend(rng.randrange(vocab) for _ in range(tokens_in))
        cursor = StreamCursor(seq, 0)
        cursor.delta()  # the output so far has gone out
        seqs.append(seq)
        cursors.append(cursor)
    deltas_s = pickle_s = 0.0
    for _ in range(num_steps):
        for seq in seqs:
            seq.token_ids.append(rng.randrange(vocab))  # the step's token, as postprocessing appends it
        start = time.perf_counter()
        events = [("delta", f"req-{i}", cursor.delta()) for i, cursor in enumerate(cursors)]
        pickled = time.perf_counter()
        pickle.dumps([(events, None)])
        deltas_s += pickled - start
        pickle_s += time.perf_counter() - pickled
    return {"deltas_s": deltas_s / num_steps, "pickle_s": pickle_s / num_steps}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--streams", type=int, default=512)
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--tokens-in", type=int, default=960)
    args = parser.parse_args()
    costs = stream_step_costs(args.streams, args.steps, args.tokens_in)
    print(
        f"{args.streams} streams, {args.tokens_in} tokens in: deltas {costs['deltas_s'] * 1e3:.2f} ms a step "
        f"({costs['deltas_s'] / args.streams * 1e6:.2f} us a stream), the step's message pickled "
        f"{costs['pickle_s'] * 1e3:.2f} ms"
    )


if __name__ == "__main__":
    main()
