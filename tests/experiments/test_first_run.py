"""What a new user meets on a CPU: speed experiments made CPU-sized (saying so, and never over a key the
command line set), a word on the random weights, progress counted in tokens, and seeded completions."""

import dataclasses
import re

import pytest
from omegaconf import open_dict

from experiments.harness.config import cpu_sized_note, workload_config
from experiments.runners import generate
from nvllm import SamplingParams
from nvllm.run import compose_config
from tests.helpers.engine_utils import random_prompt, tiny_llm
from tests.helpers.experiment_utils import TINY


@pytest.mark.parametrize("name", ["bench", "sweep", "latency"])
def test_speed_experiments_are_cpu_sized_on_the_cpu_and_say_so(name):
    cfg = compose_config([f"+experiment={name}"])
    full, on_cpu = workload_config(cfg), workload_config(cfg, "cpu")
    assert workload_config(cfg, "cuda") == full
    assert full.output_len == 1024 and on_cpu.output_len <= 128
    assert on_cpu.num_seqs * on_cpu.output_len <= 1024  # a few minutes of decode on 2 cores
    note = cpu_sized_note(cfg, on_cpu)
    assert note.startswith("On the CPU: a CPU-sized workload (") and "workload.on_cpu=null" in note
    assert cpu_sized_note(cfg, full) is None
    as_given = workload_config(compose_config([f"+experiment={name}", "workload.on_cpu=null"]), "cpu")
    assert as_given == dataclasses.replace(full, on_cpu=None)


def test_a_key_set_on_the_command_line_is_kept_on_the_cpu():
    on_cpu = workload_config(compose_config(["+experiment=bench", "workload.num_seqs=32"]), "cpu")
    assert on_cpu.num_seqs == 32 and on_cpu.output_len == 64
    cfg = compose_config(["+experiment=bench", "workload.output_len=200"], return_hydra_config=True)
    with open_dict(cfg):  # as a Hydra callback sees a job: the overrides in its hydra node
        cfg.workload.on_cpu = {"num_seqs": 8, "output_len": 64}
    assert (workload_config(cfg, "cpu").num_seqs, workload_config(cfg, "cpu").output_len) == (8, 200)


def test_the_default_run_says_its_weights_are_random_and_seeded_runs_repeat(tmp_path, capsys):
    def completions(*overrides: str) -> list[str]:
        generate.run(compose_config([*TINY, "workload.output_len=8", *overrides]), tmp_path)
        out = capsys.readouterr().out
        assert "Weights: random (model.path=null)" in out and "model.path=DIR" in out
        return re.findall(r"Completion: (.*)", out)

    first = completions()
    assert completions() == completions() == first  # sampled at temperature 0.6, seeded
    assert completions("workload.seed=1") != first  # the seed is what makes them repeat


def test_progress_is_counted_in_generated_tokens(capsys):
    with tiny_llm() as llm:
        prompts = [random_prompt(8, seed=seed) for seed in range(3)]
        llm.generate(prompts, [SamplingParams(max_tokens=n, ignore_eos=True) for n in (5, 7, 9)])
    bar = capsys.readouterr().err.replace("\r", "\n").strip().splitlines()[-1]
    assert "21/21" in bar and "tok/s" in bar and "finished 3/3" in bar
