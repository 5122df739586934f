"""The library stands apart from the experiment harness, and a wheel built from the repo serves both the
Python API and `python -m nvllm.run` outside the checkout."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# without $PYTHONPATH, which would put a checkout's packages before the wheel's
QUIET = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
QUIET |= {"OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def test_the_library_imports_neither_hydra_nor_the_harness_nor_the_grammar_engine():
    code = (
        "import sys, nvllm, nvllm.config\n"
        "from nvllm import LLM\n"
        "loaded = {name.split('.')[0] for name in sys.modules}\n"
        "sys.exit(sorted(loaded & {'hydra', 'experiments', 'llguidance'}) or 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_an_installed_wheel_serves_the_api_and_the_run_command(tmp_path):
    # built from a copy of the sources: setuptools builds in the source tree, and a checkout's stale
    # build/lib (a module since deleted or renamed) would land in the wheel and hide a missing file
    source = tmp_path / "source"
    for part in ("nvllm", "experiments", "conf", "hydra_plugins"):
        shutil.copytree(REPO / part, source / part, ignore=shutil.ignore_patterns("__pycache__"))
    for part in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / part, source / part)
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", "dist"]
    build = subprocess.run(
        [*pip_wheel, str(source)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=QUIET,
    )
    assert build.returncode == 0, build.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("nvllm-*.whl")
    # installed beside, not into, this interpreter: its packages (torch, hydra, ...) come from wherever the
    # outer environment put them, nvllm and the harness from the wheel alone (first on the path)
    target = tmp_path / "site"
    install = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "-q",
        "--no-deps",
        "--no-index",
        "--target",
        str(target),
    ]
    installed = subprocess.run([*install, str(wheel)], capture_output=True, text=True, env=QUIET)
    assert installed.returncode == 0, installed.stderr[-2000:]
    on_path = {"PYTHONPATH": str(target)}

    def start(*args: str, **env: str) -> subprocess.Popen:
        environment = {**QUIET, **on_path, **env}
        return subprocess.Popen(
            [sys.executable, *args],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environment,
        )

    def output_of(process: subprocess.Popen) -> str:
        stdout, stderr = process.communicate(timeout=600)
        assert process.returncode == 0, stderr[-3000:]
        return stdout

    # the commands are independent of one another: started together, they overlap their interpreters'
    # start-up (torch's, Hydra's) on the machine's cores
    api = (
        "import nvllm, experiments\n"
        "from nvllm import LLM, SamplingParams\n"
        f"assert nvllm.__file__.startswith({str(target)!r})\n"
        f"assert experiments.__file__.startswith({str(target)!r})\n"
        "with LLM(model='tiny', model__vocab_size=4096) as llm:\n"
        "    print(llm.generate([[1, 2, 3]], SamplingParams(max_tokens=3), use_tqdm=False)[0]['token_ids'])"
    )
    api_run = start("-c", api)
    # the console script as pip wrote it, run by this interpreter: the default experiment, and Hydra's shell
    # completion through it
    nvllm = str(target / "bin" / "nvllm")
    overrides = ["model=tiny", "workload.num_seqs=1", "workload.output_len=2"]
    default_run = start(nvllm, "run", *overrides, f"hydra.run.dir={tmp_path / 'run'}")
    key_completion = start(nvllm, "-sc", "query=bash", COMP_LINE="nvllm run model=tiny cache.bl")
    command_completion = start(nvllm, "-sc", "query=bash", COMP_LINE="nvllm su")
    # `python -m nvllm.run --help`: the experiments, groups with their options, the most used keys
    help_page = start("-m", "nvllm.run", "+experiment=bench", "--help")

    assert len(eval(output_of(api_run).splitlines()[-1])) == 3
    output = output_of(default_run)
    assert "Throughput: 2 tokens" in output and (tmp_path / "run" / "results.json").is_file()
    assert output_of(key_completion).split() == ["cache.block_size="]
    assert output_of(command_completion).split() == ["summarize"]
    page = output_of(help_page)
    assert "  latency " in page and "[qwen3-0.6b] qwen3-1.7b" in page and "schema" not in page
    assert "lengths_from_file" in page and "workload.repeats " in page
    assert "workload.num_seqs                 requests per repeat [256]" in page  # bench's value
