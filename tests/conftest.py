import os

import pytest
import torch

from tests.helpers.checkpoints import write_checkpoint

# The CI machine has 2 cores; OpenMP's spinning threads make the tiny models' small matmuls far slower on a
# loaded machine, and one thread is as fast as two on an idle one at these sizes.
torch.set_num_threads(1)


# Many tests start processes of their own (tensor-parallel workers, servers, sweeps), each worker holds torch
# and its compiled kernels: more workers than this only contend for cores and memory.
MAX_WORKERS = 4


def pytest_xdist_auto_num_workers(config):
    """`-n auto` (pyproject's addopts): a worker per core up to MAX_WORKERS on the CPU; none where CUDA is, as
    the GPU tests measure the device's memory and time its kernels, which a second worker's would disturb.
    $PYTEST_XDIST_AUTO_NUM_WORKERS still decides where it is set."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    if torch.cuda.is_available():
        return 0
    return min(os.cpu_count() or 1, MAX_WORKERS)


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs CUDA (run on the device: pytest -m gpu)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """A seeded random tiny Qwen3 in Hugging Face's on-disk format (two safetensors shards + index)."""
    return write_checkpoint(tmp_path_factory.mktemp("tiny-qwen3"), "tiny", seed=0, num_files=2)


@pytest.fixture
def engine_left_idle(request):
    """After a test that uses a module's shared `llm`: whatever it left queued is dropped, so that a case that
    fails fails alone rather than every case after it."""
    yield
    if "llm" in request.fixturenames:
        request.getfixturevalue("llm").abort_all()
