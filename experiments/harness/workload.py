"""An experiment's requests, drawn from its `workload` config: text prompts, or seeded random tokens with
lengths drawn uniformly or from a file of lengths."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

from experiments.harness.config import WorkloadConfig, conf_dir
from experiments.harness.sharegpt import ShareGPTPool, check_sharegpt_file
from experiments.runners.shared_prefix_workload import shared_prefix_prompts
from nvllm.engine.llm_engine import Prompt
from nvllm.engine.request_validation import longest_prompt
from nvllm.sampling_params import SamplingParams

# nano-vLLM's bench draws prompt token ids from [0, 10000]: the same draws make the same workload.
MAX_RANDOM_TOKEN_ID = 10_000
LENGTH_COLUMNS = ("input_len", "output_len")


def lengths_path(name: str) -> Path:
    """`workload.lengths_file` as a path: from the working directory, else from conf/workload/."""
    path = Path(name).expanduser()
    if path.is_absolute() or path.is_file() or not (conf_dir() / "workload" / path).is_file():
        return path
    return conf_dir() / "workload" / path


def _length_rows(path: Path) -> list[tuple[int, dict]]:
    """The file's rows with the line each is on (blank lines skipped, counted)."""
    if path.suffix == ".jsonl":
        lines = path.read_text().splitlines()
        rows = []
        for number, line in enumerate(lines, start=1):
            if line.strip():
                try:
                    rows.append((number, json.loads(line)))
                except json.JSONDecodeError as error:
                    raise ValueError(f"{path}, line {number}: no JSON ({error})") from None
        return rows
    if path.suffix == ".csv":
        with open(path, newline="") as file:
            reader = csv.DictReader(file)
            return [(reader.line_num, row) for row in reader]
    raise ValueError(f"workload.lengths_file={str(path)!r}: a .jsonl or .csv file is expected")


def _length(value: object) -> int | None:
    """A length as the file spells it: a JSON integer (not `true`, not `1e400` or `3.5`) or a CSV cell of
    digits; None for anything else."""
    if isinstance(value, str):
        return int(value) if value.strip().isdigit() else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def read_lengths(name: str, max_model_len: int | None = None) -> list[tuple[int, int]]:
    """The (input_len, output_len) rows of a lengths file, each checked: positive integers, and a prompt
    that the engine of `max_model_len` takes. A bad row is named by file and line."""
    path = lengths_path(name)
    if not path.is_file():
        raise ValueError(
            f"workload.lengths_file={name!r}: no such file (looked from the working directory "
            f"and in {conf_dir() / 'workload'})"
        )
    try:
        rows = _length_rows(path)
    except (csv.Error, UnicodeDecodeError) as error:
        raise ValueError(f"workload.lengths_file={str(path)!r} cannot be read: {error}") from None
    lengths = []
    for line, row in rows:
        values = [row.get(column) if isinstance(row, dict) else None for column in LENGTH_COLUMNS]
        input_len, output_len = (_length(value) for value in values)
        if not (input_len and output_len and input_len > 0 and output_len > 0):
            raise ValueError(f"{path}, line {line}: {row!r} needs positive integers {LENGTH_COLUMNS}")
        if max_model_len is not None:
            check_prompt_len(input_len, max_model_len, f"{path}, line {line}: input_len")
        lengths.append((input_len, output_len))
    if not lengths:
        raise ValueError(f"workload.lengths_file={str(path)!r} holds no rows")
    return lengths


def check_prompt_len(prompt_len: int, max_model_len: int, what: str) -> None:
    """A prompt the engine would refuse, found before the engine is built."""
    if prompt_len > longest_prompt(max_model_len):
        raise ValueError(
            f"{what}={prompt_len} leaves no room for output within scheduler.max_model_len={max_model_len} "
            "(prompt + output tokens): shorten the prompts or raise scheduler.max_model_len"
        )


def check_workload_fits(workload: WorkloadConfig, max_model_len: int) -> None:
    """Every random prompt of the workload fits the engine, and a ShareGPT file is there: checked before
    anything is built (its conversations that do not fit are skipped when it is read)."""
    if workload.sharegpt_file is not None:
        check_sharegpt_file(workload.sharegpt_file)
    elif workload.lengths_file is not None:
        read_lengths(workload.lengths_file, max_model_len)
    elif workload.num_prefixes:
        check_prompt_len(
            workload.prefix_len + workload.input_len, max_model_len, "workload.prefix_len + input_len"
        )
    elif not workload.prompts:
        check_prompt_len(workload.input_len, max_model_len, "workload.input_len")


def make_requests(
    workload: WorkloadConfig, vocab_size: int, repeat: int = 0, sharegpt: ShareGPTPool | None = None
) -> tuple[list[Prompt], list[SamplingParams]]:
    """`num_seqs` prompts with their sampling params; the same ones for the same seed and repeat, whatever
    the engine. Repeat i draws with seed `workload.seed + i`: fresh random prompts, so the prefix cache
    never serves one repeat from another's KV blocks.

    Random prompts are drawn exactly as nano-vLLM's bench.py draws them (Python's `random` seeded with
    `workload.seed`: each prompt's length then its token ids, then every output length), so that the
    bench experiment and nano-vLLM's script run the very same requests (133,966 output tokens for seed 0).
    With `workload.sharegpt_file`, the requests are drawn from `sharegpt`, the file as read for the engine."""
    rng = random.Random(workload.seed + repeat)
    count = workload.num_seqs
    max_token_id = min(MAX_RANDOM_TOKEN_ID, vocab_size - 1)

    def random_prompt(num_tokens: int) -> list[int]:
        return [rng.randint(0, max_token_id) for _ in range(num_tokens)]

    def length(shortest: int | None, longest: int) -> int:
        return longest if shortest is None else rng.randint(shortest, longest)

    def params(max_tokens: int) -> SamplingParams:
        return SamplingParams(
            temperature=workload.temperature, max_tokens=max_tokens, ignore_eos=workload.ignore_eos
        )

    if workload.sharegpt_file is not None:
        if sharegpt is None:
            raise ValueError("workload.sharegpt_file needs the file read with the engine's tokenizer")
        drawn = sharegpt.draw(count, rng)
        return [prompt for prompt, _ in drawn], [params(output_len) for _, output_len in drawn]
    if workload.lengths_file is not None:
        lengths = rng.choices(read_lengths(workload.lengths_file), k=count)
        return [random_prompt(input_len) for input_len, _ in lengths], [params(out) for _, out in lengths]
    if workload.num_prefixes:
        prompts = shared_prefix_prompts(workload, rng, max_token_id)
    elif workload.prompts:
        prompts = [workload.prompts[i % len(workload.prompts)] for i in range(count)]
    else:
        prompts = [random_prompt(length(workload.min_input_len, workload.input_len)) for _ in range(count)]
    return prompts, [params(length(workload.min_output_len, workload.output_len)) for _ in range(count)]
