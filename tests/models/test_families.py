"""Every dense family against transformers' own implementation, on tiny random checkpoints transformers wrote
(tests/helpers/family_checkpoints.py): greedy tokens and top-k log-probabilities in fp32, through chunked
prefill and prefix-cache hits, at TP=1 and TP=2; Llama 3's RoPE frequencies; the presets' sizes; and the
settings each family refuses by name."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from nvllm import SamplingParams
from nvllm.config import ModelConfig
from nvllm.layers.rotary import inverse_frequencies
from nvllm.models.hf_config import model_from_checkpoint, rope_settings
from nvllm.models.presets import PRESETS
from nvllm.models.weights import hf_parameter_shapes
from tests.helpers.family_checkpoints import FAMILIES, load_family_model, write_family_checkpoint
from tests.helpers.parallel_oracle import prefill_logits, relative_error
from tests.helpers.transformers_parity import NUM_TOKENS, PROMPTS, assert_greedy_equals_transformers, engine

# Qwen3's own parity tests are tests/models/test_model_parity.py, Qwen3-MoE's test_qwen3_moe.py
DENSE_FAMILIES = [family for family in FAMILIES if family not in ("qwen3", "qwen3_moe")]


@pytest.fixture(scope="module", params=DENSE_FAMILIES)
def family_checkpoint(request, tmp_path_factory):
    return request.param, write_family_checkpoint(tmp_path_factory.mktemp(request.param), request.param)


# biases on q/k/v and o, a given head_dim (llama3); q/k/v biases alone, tied embeddings, a derived head_dim
# (qwen2): what a split over ranks could get wrong beyond what Qwen3's own TP tests cover
TP_FAMILIES = ("llama3", "qwen2")


def test_greedy_tokens_and_logprobs_equal_transformers(family_checkpoint):
    _, path = family_checkpoint
    assert_greedy_equals_transformers(path)


@pytest.mark.parametrize("family", TP_FAMILIES)
def test_tensor_parallel_computes_what_one_rank_does(tmp_path, family):
    """TP=2 over gloo: the biases and heads split over the ranks, the same logits and greedy tokens."""
    path = write_family_checkpoint(tmp_path, family)
    params = SamplingParams(max_tokens=NUM_TOKENS, temperature=0, ignore_eos=True)
    runs = {}
    for tp in (1, 2):
        with engine(path, tensor_parallel_size=tp, max_num_batched_tokens=128) as llm:
            # one prefill step of prompts that share no prefix (a shared one is admitted its leader first)
            runs[tp] = prefill_logits(llm, PROMPTS[:3]), llm.generate(PROMPTS, params, use_tqdm=False)
    assert relative_error(runs[2][0], runs[1][0]) < 1e-5
    assert [o.outputs[0].token_ids for o in runs[2][1]] == [o.outputs[0].token_ids for o in runs[1][1]]


@pytest.mark.parametrize(
    "scaling",
    [
        dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=8192),
        dict(factor=32.0, low_freq_factor=2.0, high_freq_factor=8.0, original_max_position_embeddings=512),
    ],
    ids=["llama-3.1", "other-factors"],
)
def test_llama3_frequencies_are_transformers(scaling):
    hf = {"hidden_size": 4096, "num_attention_heads": 32, "rope_theta": 500000.0}
    hf["rope_scaling"] = {"rope_type": "llama3", **scaling}
    inv_freq, scale = inverse_frequencies(ModelConfig(head_dim=128, **rope_settings(hf)))
    reference, reference_scale = ROPE_INIT_FUNCTIONS["llama3"](LlamaConfig(**hf), "cpu")
    torch.testing.assert_close(inv_freq, reference, rtol=1e-6, atol=0)
    assert scale == reference_scale == 1.0


# the published parameter counts (model cards), from each preset's shapes
PRESET_PARAMETERS = {
    "llama-3.1-8b": 8_030_261_248,
    "llama-3.2-1b": 1_235_814_400,
    "llama-3.2-3b": 3_212_749_824,
    "qwen2.5-0.5b": 494_032_768,
    "qwen2.5-7b": 7_615_616_512,
    "mistral-7b-v0.3": 7_248_023_552,
}


@pytest.mark.parametrize("preset", PRESET_PARAMETERS)
def test_presets_have_the_published_sizes(preset):
    shapes = hf_parameter_shapes(PRESETS[preset])
    assert sum(torch.Size(shape).numel() for shape in shapes.values()) == PRESET_PARAMETERS[preset]


@pytest.fixture(scope="module")
def family_config(tmp_path_factory):
    """`family`'s config.json as transformers writes it with a checkpoint: each family's written once for the
    module, as only the config.json is read."""
    written = {}

    def config_of(family: str) -> dict:
        if family not in written:
            directory = write_family_checkpoint(tmp_path_factory.mktemp(family), family)
            written[family] = (directory / "config.json").read_text()
        return json.loads(written[family])

    return config_of


def config_json(tmp_path, config: dict, **changes) -> str:
    """A checkpoint directory holding only `config` (a family's config.json) with `changes` (None drops a
    key)."""
    directory = tmp_path / "checkpoint"
    directory.mkdir()
    config.update(changes)
    config = {key: value for key, value in config.items() if value is not None}
    (directory / "config.json").write_text(json.dumps(config))
    return str(directory)


REFUSED = [  # (family, config.json changes, the error's message)
    (  # a transformers 4 config.json: no layer_types, which transformers 5 writes out from these keys
        "qwen2",
        {"use_sliding_window": True, "max_window_layers": 1, "sliding_window": 64, "layer_types": None},
        "use_sliding_window=true",
    ),
    (
        "qwen2",
        {"layer_types": ["full_attention", "sliding_attention", "sliding_attention"]},
        "layer_types",
    ),
    ("mistral", {"sliding_window": 256}, "sliding_window=256"),
    # transformers' default when the key is left out
    ("mistral", {"sliding_window": None, "max_position_embeddings": 8192}, "sliding_window=4096"),
    ("llama3", {"mlp_bias": True}, "mlp_bias=true"),
    ("llama3", {"rope_parameters": {"rope_type": "llama3", "factor": 8.0}}, "llama3 RoPE needs"),
    ("llama3", {"rope_parameters": {"rope_type": "dynamic", "factor": 2.0}}, "rope_type='dynamic'"),
    ("llama3", {"architectures": ["GemmaForCausalLM"]}, "unsupported architecture 'GemmaForCausalLM'"),
]


@pytest.mark.parametrize("family, changes, message", REFUSED)
def test_a_setting_the_engine_does_not_implement_is_refused_by_name(
    tmp_path, family_config, family, changes, message
):
    with pytest.raises(ValueError, match=message):
        model_from_checkpoint(config_json(tmp_path, family_config(family), **changes))


ACCEPTED = [  # settings that leave the model as it is
    # the window from layer 3 on: no layer is behind it
    ("qwen2", {"use_sliding_window": True, "max_window_layers": 3, "layer_types": None}),
    ("mistral", {"sliding_window": 512}),  # as long as the context: never reached
    ("qwen2", {"attention_bias": False}),  # transformers' Qwen2 has q/k/v biases whatever this says
]


@pytest.mark.parametrize("family, changes", ACCEPTED)
def test_a_setting_that_leaves_the_model_unchanged_is_accepted(tmp_path, family_config, family, changes):
    config = model_from_checkpoint(config_json(tmp_path, family_config(family), **changes))
    assert config.architecture == FAMILIES[family][1].__name__


def test_every_end_of_sequence_token_a_checkpoint_lists_stops_generation(tmp_path):
    """Llama 3.1 Instruct lists three EOS ids (config.json and generation_config.json): each ends a sequence
    as EOS does (finish reason "stop", no stop reason), as in vLLM."""
    path = write_family_checkpoint(tmp_path, "llama3", eos_token_id=[151643, 151645])
    prompt = list(range(1000, 1010))
    with engine(path) as llm:
        free = llm.generate(
            [prompt], SamplingParams(max_tokens=6, temperature=0, ignore_eos=True), use_tqdm=False
        )
    tokens = free[0].outputs[0].token_ids
    assert tokens[2] not in tokens[:2]
    (path / "generation_config.json").write_text(json.dumps({"eos_token_id": [151645, tokens[2]]}))
    assert model_from_checkpoint(str(path)).eos_token_ids == (151643, 151645, tokens[2])
    with engine(path) as llm:
        stopped = llm.generate([prompt], SamplingParams(max_tokens=6, temperature=0), use_tqdm=False)
    sample = stopped[0].outputs[0]
    assert sample.token_ids == tokens[:3] and (sample.finish_reason, sample.stop_reason) == ("stop", None)


@pytest.mark.parametrize("family", ["llama3", "qwen2"])
def test_fp8_weights_with_biases_match_transformers_on_the_dequantized_weights(tmp_path, family):
    """`model.quantization=fp8` on families with biases: the matmuls' weights quantized, the biases added
    unquantized after them, as transformers computes with the dequantized weights."""
    from nvllm.ops.fp8 import dequantized, quantize_rows

    path = write_family_checkpoint(tmp_path, family)
    hf = load_family_model(path)
    for module in hf.model.layers.modules():
        if isinstance(module, torch.nn.Linear):
            module.weight.data = dequantized(*quantize_rows(module.weight.data), torch.float32)
    with engine(path, model__quantization="fp8", max_num_batched_tokens=128) as llm:
        ours = prefill_logits(llm, PROMPTS[:3])
    with torch.no_grad():
        for row, prompt in zip(ours, PROMPTS[:3]):
            torch.testing.assert_close(row, hf(torch.tensor([prompt])).logits[0, -1], atol=2e-4, rtol=1e-4)
