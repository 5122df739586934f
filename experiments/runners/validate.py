"""`+experiment=validate`: does the engine, with these settings, run the model the checkpoint holds? Greedy
generations of a few prompts (or `validate.prompts=FILE`, one a line) against transformers'
(`AutoModelForCausalLM`, any architecture) on the same weights, in the same dtype, on the GPU when the engine
runs on one. Per prompt: the tokens followed and the first divergence, which passes where it is a near-tie
of the fp32 model (experiments.harness.parity's rule, with the noise transformers itself shows in the
engine's dtype). A preset's random weights are written out as a checkpoint for transformers first."""

from __future__ import annotations

import tempfile
from pathlib import Path

from omegaconf import DictConfig

from experiments.harness.hf_checkpoint import write_random_checkpoint
from experiments.harness.job import job_run, prepare_job
from experiments.runners.validate_reference import Comparison, compare_with_transformers
from nvllm.config import EngineConfig
from nvllm.sampling_params import SamplingParams
from nvllm.tokenizer.tokenizer import Tokenizer

BUILTIN_PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n",
    "Water boils at a temperature of",
    "Once upon a time, in a small village by the sea,",
    "1, 1, 2, 3, 5, 8, 13,",
]


def read_prompts(file: str | None) -> list[str]:
    """`validate.prompts`: the file's non-empty lines, or the built-in prompts when no file is named."""
    if file is None:
        return BUILTIN_PROMPTS
    try:
        lines = Path(file).read_text().splitlines()
    except (OSError, UnicodeError) as error:
        raise ValueError(f"validate.prompts={file!r}: not a readable text file ({error})") from None
    prompts = [line for line in lines if line.strip()]
    if not prompts:
        raise ValueError(f"validate.prompts={file!r} holds no prompt (one a line)")
    return prompts


def checkpoint_for_transformers(engine: EngineConfig, scratch: str) -> str:
    """The engine's checkpoint, or for a preset its seeded random weights written into `scratch`."""
    if engine.model.path is not None:
        return engine.model.path
    return str(write_random_checkpoint(Path(scratch), engine.model, engine.seed))


def prompt_line(number: int, comparison: Comparison, tokenizer: Tokenizer, noise: float) -> str:
    compared = len(comparison.ours)
    if (index := comparison.parted_at) is None:
        return f"prompt {number}: {compared}/{compared} tokens followed"
    ours, theirs = comparison.ours[index], comparison.theirs[index]
    kind = "a near-tie" if comparison.parts_at_near_tie(noise) else "NO near-tie"
    return (
        f"prompt {number}: {index}/{compared} tokens followed, then nvllm {ours} "
        f"{tokenizer.decode([ours])!r} and transformers {theirs} {tokenizer.decode([theirs])!r}: fp32 "
        f"logits {comparison.fp32_gap:.4g} apart, noise {noise:.4g}: {kind}"
    )


def summary(comparisons: list[Comparison], noise: float) -> dict:
    near_ties = sum(c.parts_at_near_tie(noise) for c in comparisons)
    parted = sum(c.parted_at is not None for c in comparisons)
    return {
        "passed": parted == near_ties,
        "num_prompts": len(comparisons),
        "num_followed": len(comparisons) - parted,
        "num_near_tie_partings": near_ties,
        "num_divergences": parted - near_ties,  # partings that are no near-tie: errors
        "tokens_followed": sum(c.tokens_followed for c in comparisons),
        "tokens_compared": sum(len(c.ours) for c in comparisons),
        "noise": noise,
    }


def verdict(metrics: dict) -> str:
    counts = (
        f"{metrics['num_prompts']} prompts: {metrics['num_followed']} followed all the way, "
        f"{metrics['num_near_tie_partings']} parted at a near-tie, {metrics['num_divergences']} diverged "
        f"({metrics['tokens_followed']}/{metrics['tokens_compared']} tokens followed)"
    )
    return f"Verdict: {'PASS' if metrics['passed'] else 'FAIL'}: {counts}"


def run(cfg: DictConfig, output_dir: Path, name: str | None = None) -> dict:
    job = prepare_job(cfg, output_dir, name, job_type="validate")
    texts = read_prompts(cfg.validate.prompts)
    if cfg.validate.max_tokens < 1:
        raise ValueError(f"validate.max_tokens={cfg.validate.max_tokens} must be positive")
    greedy = SamplingParams(temperature=0, max_tokens=cfg.validate.max_tokens, ignore_eos=True)
    with job_run(job) as run, tempfile.TemporaryDirectory(prefix="nvllm-validate-") as scratch:
        tokenizer = run.llm.tokenizer
        prompts = [tokenizer.encode(text) for text in texts]
        generations = [out["token_ids"] for out in run.llm.generate(prompts, greedy, use_tqdm=False)]
        run.llm.shutdown()  # its device memory goes to transformers
        checkpoint = checkpoint_for_transformers(job.engine, scratch)
        comparisons = compare_with_transformers(
            checkpoint, job.engine.model.dtype, job.engine.device, prompts, generations
        )
        noise = max(comparison.noise for comparison in comparisons)
        metrics = summary(comparisons, noise)
        rows = [
            {
                "prompt": text,
                "tokens_followed": c.tokens_followed,
                "parted_at": c.parted_at,
                "fp32_gap": c.fp32_gap,
                "near_tie": c.parts_at_near_tie(noise),
                "nvllm": c.ours,
                "transformers": c.theirs,
            }
            for text, c in zip(texts, comparisons, strict=True)
        ]
        run.record(metrics, [metrics], details={"prompts": rows})
    for number, comparison in enumerate(comparisons):
        print(prompt_line(number, comparison, tokenizer, noise))
    print(verdict(metrics))
    return metrics
