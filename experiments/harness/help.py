"""`nvllm run --help`: the experiments, the config groups and their options, and the keys most runs set,
one line each, with the values the command line composes (Hydra's help page, `hydra/help=nvllm`)."""

from __future__ import annotations

import re
from pathlib import Path

from omegaconf import OmegaConf

# The keys most runs set; the help shows each with its composed value (an interpolation of the key).
COMMON_KEYS = {
    "model.path": "an HF checkpoint dir or hub id (org/name); null: seeded random weights of `model`",
    "model.quantization": "none | fp8 (the decoder layers' matmul weights in float8, a scale per channel)",
    "device": "auto | cpu | cuda | cuda:N",
    "cache.block_size": "tokens per KV block (flash-attn needs a multiple of 256)",
    "cache.num_blocks": "KV blocks; null: as many as cache.gpu_memory_utilization allows",
    "cache.enable_prefix_caching": "reuse the KV blocks of identical prompt prefixes",
    "scheduler.max_num_seqs": "sequences in one batch",
    "scheduler.max_num_batched_tokens": "tokens in one step: the batch budget",
    "scheduler.max_model_len": "prompt + output tokens of one sequence",
    "scheduler.num_decode_steps": "decode steps per scheduling round (the host reads tokens once a round)",
    "parallel.tensor_parallel_size": "tensor-parallel ranks (or parallel=tp2|tp4|tp8)",
    "compile.enabled": "torch.compile and CUDA graphs; null: on CUDA only",
    "attention.backend": "auto | flash_attn | torch",
    "workload.num_seqs": "requests per repeat",
    "workload.input_len": "prompt tokens (uniform from workload.min_input_len when that is set)",
    "workload.output_len": "new tokens (uniform from workload.min_output_len when that is set)",
    "workload.lengths_file": "a JSONL or CSV of input_len,output_len rows to draw lengths from",
    "workload.sharegpt_file": "a ShareGPT JSON file of conversations to draw prompts and output lengths from",
    "workload.repeats": "measured repeats on fresh requests; null: 3 on a GPU, 1 on the CPU",
    "workload.seed": "draws the requests (repeat i: seed + i)",
    "cpu_threads": "torch's CPU threads; null: $OMP_NUM_THREADS, else the available cores",
    "wandb.mode": "online | offline | disabled (default: $WANDB_MODE, else offline)",
    "wandb.quiet": "wandb prints nothing; one line says where the run is",
    "summary.metric": "the metric a sweep's summary tabulates and plots",
    "summary.x": "its x-axis key (null: the first swept key); summary.hue: the lines (the second)",
}
HIDDEN_OPTIONS = {"schema"}  # the groups' typed bases, which every option extends


def first_sentence(path: Path, limit: int = 96) -> str:
    """The first sentence of a YAML file's header comment (after a `@package` line)."""
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        if "@package" not in line:
            lines.append(line.lstrip("# ").rstrip())
    text = " ".join(lines)
    sentence = text.split(". ")[0].rstrip(".")
    return sentence if len(sentence) <= limit else sentence[: limit - 1].rstrip() + "…"


def group_options(conf_dir: Path, group: str) -> list[str]:
    from hydra.core.config_store import ConfigStore

    files = {path.stem for path in (conf_dir / group).glob("*.yaml")}
    try:
        stored = {name.removesuffix(".yaml") for name in ConfigStore.instance().list(group)}
    except OSError:  # no such group in the store
        stored = set()
    # in natural order: qwen3-4b before qwen3-14b
    return sorted(
        (files | stored) - HIDDEN_OPTIONS,
        key=lambda name: [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)],
    )


def help_template(conf_dir: Path) -> str:
    defaults = {}
    for entry in OmegaConf.to_container(OmegaConf.load(conf_dir / "config.yaml"))["defaults"]:
        if isinstance(entry, dict):
            defaults.update({group: option for group, option in entry.items() if " " not in group})
    experiments = sorted((conf_dir / "experiment").glob("*.yaml"))
    width = max([len(path.stem) for path in experiments] + [len(group) for group in defaults])
    lines = [
        "nvllm run: one experiment, composed from conf/ and the command line (python -m nvllm.run).",
        "",
        "  nvllm run [+experiment=NAME] [GROUP=OPTION ...] [KEY=VALUE ...]    one run",
        "  nvllm run -m KEY=V1,V2 ...                                          a sweep: one job per value",
        "  nvllm run ... --cfg job                                             print the composed config",
        "",
        "== Experiments (+experiment=NAME; none: a few prompts and their completions) ==",
    ]
    lines += [f"  {path.stem.ljust(width)}  {literal(first_sentence(path))}" for path in experiments]
    lines += ["", "== Groups (GROUP=OPTION; [the default]) =="]
    for group, default in defaults.items():
        options = [
            f"[{option}]" if option == default else option for option in group_options(conf_dir, group)
        ]
        lines.append(f"  {group.ljust(width)}  {' '.join(options)}")
    key_width = max(map(len, COMMON_KEYS))
    lines += ["", "== Most used keys (KEY=VALUE; [the value this command line composes]) =="]
    lines += [f"  {key.ljust(key_width)}  {literal(text)} [${{{key}}}]" for key, text in COMMON_KEYS.items()]
    lines += ["", "== Flags ==", "$FLAGS_HELP"]
    return "\n".join(lines) + "\n"


def literal(text: str) -> str:
    """`text` as Hydra's help template shows it: OmegaConf resolves `${key}` in the template, then
    string.Template substitutes `$FLAGS_HELP`, so a `$` of prose is doubled."""
    return text.replace("$", "$$")


def help_config(conf_dir: Path) -> dict:
    return {"app_name": "nvllm", "header": "", "footer": "", "template": help_template(conf_dir)}
