"""Maps a checkpoint's `architectures[0]` to the class that implements it."""

from torch import nn

from nvllm.models.qwen3 import Qwen3ForCausalLM

MODEL_REGISTRY: dict[str, type[nn.Module]] = {
    "Qwen3ForCausalLM": Qwen3ForCausalLM,
}


def model_class(architecture: str) -> type[nn.Module]:
    if architecture not in MODEL_REGISTRY:
        raise ValueError(f"unsupported architecture {architecture!r}; supported: {sorted(MODEL_REGISTRY)}")
    return MODEL_REGISTRY[architecture]
