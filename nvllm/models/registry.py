"""Maps a checkpoint's `architectures[0]` to the class that implements it. Adding a dense family is a file
beside these (a `DecoderForCausalLM` subclass) and its line here."""

from nvllm.models.decoder import DecoderForCausalLM
from nvllm.models.llama import LlamaForCausalLM
from nvllm.models.mistral import MistralForCausalLM
from nvllm.models.qwen2 import Qwen2ForCausalLM
from nvllm.models.qwen3 import Qwen3ForCausalLM
from nvllm.models.qwen3_moe import Qwen3MoeForCausalLM

MODEL_REGISTRY: dict[str, type[DecoderForCausalLM]] = {
    "Qwen3ForCausalLM": Qwen3ForCausalLM,
    "Qwen2ForCausalLM": Qwen2ForCausalLM,
    "LlamaForCausalLM": LlamaForCausalLM,
    "MistralForCausalLM": MistralForCausalLM,
    "Qwen3MoeForCausalLM": Qwen3MoeForCausalLM,
}


def model_class(architecture: str) -> type[DecoderForCausalLM]:
    if architecture not in MODEL_REGISTRY:
        raise ValueError(f"unsupported architecture {architecture!r}; supported: {sorted(MODEL_REGISTRY)}")
    return MODEL_REGISTRY[architecture]
