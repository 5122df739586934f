"""Hub ids (`org/name`) as models, read from huggingface_hub's cache with HF_HUB_OFFLINE=1: never a
network call. The cache is built by hand in its on-disk layout (models--org--name/snapshots/<commit>/ and
refs/<branch> holding the commit), as huggingface_hub leaves it after a download."""

from pathlib import Path

import pytest
from huggingface_hub import constants

from experiments.harness.config import engine_config_from_run_config
from nvllm import LLM, SamplingParams
from nvllm.engine.config_resolution import engine_config
from nvllm.run import compose_config
from tests.helpers.checkpoints import write_checkpoint

REPO_ID = "tiny-org/tiny-qwen3"
MAIN, V1 = "a" * 40, "b" * 40  # the commits refs/main and refs/v1 point at
PROMPTS = [[9707, 11, 1879, 0], list(range(1000, 1023))]
GREEDY = SamplingParams(max_tokens=12, temperature=0, ignore_eos=True)
SETTINGS = dict(enforce_eager=True, kvcache_block_size=4, num_kvcache_blocks=64, max_model_len=64)


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory) -> Path:
    """A hub cache holding REPO_ID at two commits: main (seed 0) and the tag v1 (seed 1)."""
    cache = tmp_path_factory.mktemp("hub-cache")
    repo = cache / f"models--{REPO_ID.replace('/', '--')}"
    for ref, commit, seed in (("main", MAIN, 0), ("v1", V1, 1)):
        write_checkpoint(repo / "snapshots" / commit, "tiny", seed=seed)
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / ref).write_text(commit)
    return cache


@pytest.fixture
def offline_hub(hub_cache, monkeypatch) -> Path:
    """HF_HUB_OFFLINE=1 and HF_HUB_CACHE on the test cache, for this process's huggingface_hub too (it
    reads the environment once, when imported)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(hub_cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub_cache))
    return hub_cache


def snapshot(cache: Path, commit: str) -> Path:
    return cache / f"models--{REPO_ID.replace('/', '--')}" / "snapshots" / commit


def greedy_tokens(model: str, **overrides) -> list[list[int]]:
    with LLM(model, **SETTINGS, **overrides) as llm:
        return [out["token_ids"] for out in llm.generate(PROMPTS, GREEDY, use_tqdm=False)]


def test_a_hub_id_loads_its_cached_snapshot_as_the_directory_does(offline_hub):
    config = engine_config(REPO_ID, **SETTINGS)
    assert Path(config.model.path) == snapshot(offline_hub, MAIN)
    assert config.model.name == REPO_ID  # not the snapshot's commit hash
    assert greedy_tokens(REPO_ID) == greedy_tokens(str(snapshot(offline_hub, MAIN)))


def test_a_revision_picks_the_snapshot_its_ref_names(offline_hub):
    assert Path(engine_config(REPO_ID, revision="v1").model.path) == snapshot(offline_hub, V1)
    assert Path(engine_config(REPO_ID, revision=V1).model.path) == snapshot(offline_hub, V1)
    with pytest.raises(ValueError, match=r"model.revision='v1' picks a hub id's version, but 'tiny' is a"):
        engine_config("tiny", revision="v1")


def test_a_local_directory_of_the_same_name_wins(offline_hub, tmp_path, monkeypatch):
    write_checkpoint(tmp_path / REPO_ID, "tiny", seed=1)
    monkeypatch.chdir(tmp_path)
    config = engine_config(REPO_ID)
    assert Path(config.model.path).resolve() == (tmp_path / REPO_ID).resolve()
    local = greedy_tokens(REPO_ID)
    assert local == greedy_tokens(str(snapshot(offline_hub, V1)))  # the same seed's weights
    assert local != greedy_tokens(str(snapshot(offline_hub, MAIN)))


def test_an_unknown_id_offline_names_every_place_looked_in(offline_hub, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError) as error:
        LLM("no-org/no-model")
    message = str(error.value)
    assert f"no local directory {tmp_path / 'no-org' / 'no-model'}" in message
    assert "hub id 'no-org/no-model' not found in the local cache (HF_HUB_OFFLINE=1)" in message
    assert f"cache {offline_hub}" in message
    assert "presets: qwen3-0.6b" in message and "tiny" in message
    with pytest.raises(ValueError, match=rf"hub id '{REPO_ID}' at revision 'v2' not found"):
        LLM(REPO_ID, revision="v2")


def test_experiments_name_a_hub_id_as_model_path_or_as_model(offline_hub):
    for override in (f"model.path={REPO_ID}", f"model={REPO_ID}"):
        config = engine_config_from_run_config(compose_config([override, "model.revision=v1"]))
        assert Path(config.model.path) == snapshot(offline_hub, V1), override
        assert config.model.name == REPO_ID
    local = snapshot(offline_hub, MAIN)
    assert engine_config_from_run_config(compose_config([f"model={local}"])).model.path == str(local)
    with pytest.raises(ValueError, match=r"model.path='tiny' names a preset: model=tiny builds it"):
        engine_config_from_run_config(compose_config(["model.path=tiny"]))
