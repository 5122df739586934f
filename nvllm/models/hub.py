"""What a model name stands for, in the order vLLM and SGLang look: a local directory is that checkpoint; a
preset name is a preset (random weights); otherwise an `org/name` id is a Hugging Face hub repository, read
through huggingface_hub's cache (downloaded into it when missing; with `HF_HUB_OFFLINE=1`, as
huggingface_hub has it, only the cache is read). huggingface_hub is imported only for a hub id."""

from __future__ import annotations

import os

from nvllm.models.presets import PRESETS

# What serving needs from a repository: the config, the safetensors weights (sharded or not), the tokenizer
# and the generation defaults; not the other weight formats repositories often carry too (.bin, gguf, onnx)
HUB_FILES = [
    "config.json",
    "generation_config.json",
    "*.safetensors",
    "model.safetensors.index.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
]


def is_hub_id(name: str) -> bool:
    """`org/name`: two non-empty parts around one slash, and nothing that makes it a path (`./x`, `~/x`)."""
    org, slash, repo = name.partition("/")
    return bool(slash and org and repo) and "/" not in repo and not org.startswith((".", "~"))


def model_checkpoint(name: str, revision: str | None = None) -> str | None:
    """The checkpoint directory `name` stands for (the directory itself, or the hub id's snapshot in the
    cache), or None where `name` is a preset. A name that is none of them is a ValueError naming every
    place looked in. `revision` (a branch, tag or commit) picks a hub id's version; it has no meaning for a
    directory or a preset, so there it is an error."""
    directory = os.path.expanduser(name)
    found = "a local directory" if os.path.isdir(directory) else "a preset" if name in PRESETS else None
    if found is not None and revision is not None:
        raise ValueError(f"model.revision={revision!r} picks a hub id's version, but {name!r} is {found}")
    if found is not None:
        return directory if found == "a local directory" else None
    presets = ", ".join(PRESETS)
    if not is_hub_id(name):
        if os.sep in name or name.startswith((".", "~")):
            raise ValueError(
                f"model={name!r}: no such checkpoint directory ({os.path.abspath(directory)}); a preset is a "
                f"bare name ({presets}) and a hub id is org/name"
            )
        raise ValueError(
            f"unknown model {name!r}: not a directory ({os.path.abspath(directory)}), not a preset (one of "
            f"{sorted(PRESETS)}) and not a hub id (org/name)"
        )
    return hub_snapshot(name, revision, looked_in=os.path.abspath(directory))


def hub_snapshot(repo_id: str, revision: str | None, looked_in: str) -> str:
    """The cache directory holding `repo_id`'s files at `revision`, fetched into the cache if need be."""
    from huggingface_hub import constants, snapshot_download

    try:
        return snapshot_download(repo_id, revision=revision, allow_patterns=HUB_FILES)
    except (OSError, ValueError) as error:  # every hub error is one of them (not found, offline, gated)
        where = "the local cache (HF_HUB_OFFLINE=1)" if constants.HF_HUB_OFFLINE else "the hub"
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        at = f" at revision {revision!r}" if revision is not None else ""
        raise ValueError(
            f"model {repo_id!r}: no local directory {looked_in}, and hub id {repo_id!r}{at} not found in "
            f"{where}, cache {constants.HF_HUB_CACHE} ({reason}); presets: {', '.join(PRESETS)}"
        ) from None
