"""What a backend declares and the padding rule it owns beside its decode test, against values by hand."""

from nvllm.attention import (
    BACKENDS,
    FlashAttnBackend,
    GraphSupport,
    TorchBackend,
    one_query_per_sequence,
    padded_prefill_sizes,
)


def test_every_backend_declares_its_graph_support():
    assert FlashAttnBackend.graph_support is GraphSupport.ALWAYS
    assert TorchBackend.graph_support is GraphSupport.NEVER  # it reads sequence lengths on the host
    assert all(isinstance(backend.graph_support, GraphSupport) for backend in BACKENDS.values())


def test_a_padded_prefill_never_passes_the_decode_test_unless_it_has_one_query_per_sequence():
    # (tokens, sequences, longest query) -> padded (tokens, sequences)
    assert padded_prefill_sizes(2, 1, 2) == (3, 2)  # 2 tokens and 1 sequence padded to 2: one more token
    assert padded_prefill_sizes(1, 1, 1) == (2, 2)  # one query, padded with an empty sequence: a decode
    assert padded_prefill_sizes(3, 2, 2) == (3, 2)
    assert padded_prefill_sizes(4, 3, 2) == (4, 3)
    assert padded_prefill_sizes(5, 5, 1) == (5, 5)
    for tokens, seqs, longest in [(2, 1, 2), (3, 3, 1), (7, 4, 3), (1, 1, 1), (6, 6, 1), (6, 5, 2)]:
        padded = padded_prefill_sizes(tokens, seqs, longest)
        assert one_query_per_sequence(*padded) == (longest == 1)
