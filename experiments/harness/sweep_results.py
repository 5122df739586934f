"""A sweep dir (or one run's dir) read back: every job Hydra was to launch, with its overrides, whether it
finished, and its `results.json`. A job is known by what its command line set (`.hydra/overrides.yaml`),
and the sweep's grid by the sweep's own `multirun.yaml`, so jobs that never started are known too."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

from experiments.harness.tracking import RESULTS_FILE

MULTIRUN_FILE = "multirun.yaml"  # the sweep's composed config, written by Hydra's sweeper before any job
DONE, INCOMPLETE, MISSING = "done", "incomplete", "missing"  # results written; started only; never started
UNREADABLE = "unreadable"  # a results.json that is no JSON (a job killed while writing it, a full disk)


@dataclass(frozen=True)
class JobResult:
    job: str  # the job's number in the sweep (or its dir, for a dir of runs)
    status: str  # DONE | INCOMPLETE (failed, interrupted or still running) | MISSING | UNREADABLE
    overrides: dict[str, Any]  # what the job's command line set: key -> value
    results: dict | None  # its results.json

    @property
    def metrics(self) -> dict:
        return self.results["metrics"] if self.results else {}


def typed(value: str | None) -> Any:
    """An override's value as the number it spells, if it does (for ordering and plotting)."""
    if value is None:
        return None
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def parse_overrides(lines: list[str]) -> dict[str, Any]:
    """`key=value` overrides (`+key=`, `~key` included) as key -> value; a deleted key's value is None."""
    parsed = OverridesParser.create().parse_overrides(list(lines))
    return {o.key_or_group: None if o.is_delete() else typed(o.get_value_element_as_str()) for o in parsed}


def job_grid(multirun: DictConfig) -> list[list[str]] | None:
    """The overrides of every job of a basic-sweeper multirun, in the order Hydra numbers them (its own
    expansion of the sweep); None for another sweeper, whose jobs are known only once they run."""
    sweeper = multirun.hydra.sweeper
    if sweeper.get("_target_") != f"{BasicSweeper.__module__}.{BasicSweeper.__name__}":
        return None
    params = [f"{key}={value}" for key, value in (sweeper.get("params") or {}).items()]
    arguments = params + list(multirun.hydra.overrides.task)
    [jobs] = BasicSweeper.split_arguments(OverridesParser.create().parse_overrides(arguments), None)
    return jobs


def _read_results(job_dir: Path) -> tuple[str, dict | None]:
    """The job's status and results; an unreadable results.json is named on stderr and the job marked,
    so that the rest of the sweep is still summarised."""
    path = job_dir / RESULTS_FILE
    if not path.is_file():
        return INCOMPLETE, None
    try:
        return DONE, json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        print(f"Warning: {path} is unreadable ({error}): job marked {UNREADABLE}", file=sys.stderr)
        return UNREADABLE, None


def _with_overrides(read: tuple[str, dict | None], lines: list[str]) -> tuple[str, dict, dict | None]:
    status, results = read
    return status, parse_overrides(lines), results


def read_multirun(sweep_dir: Path) -> DictConfig | None:
    path = Path(sweep_dir) / MULTIRUN_FILE
    return OmegaConf.load(path) if path.is_file() else None


def read_jobs(directory: Path) -> list[JobResult]:
    """Every job of a sweep dir (complete or not), or the one job of a run's dir, in job order."""
    directory = Path(directory)
    if (directory / ".hydra").is_dir() or (directory / RESULTS_FILE).is_file():  # a single run
        overrides_file = directory / ".hydra" / "overrides.yaml"
        lines = list(OmegaConf.load(overrides_file)) if overrides_file.is_file() else []
        return [JobResult(directory.name, *_with_overrides(_read_results(directory), lines))]
    found = {}
    for hydra_dir in sorted(directory.rglob(".hydra")):
        job_dir = hydra_dir.parent
        hydra_file = hydra_dir / "hydra.yaml"
        number = (
            OmegaConf.select(OmegaConf.load(hydra_file), "hydra.job.num") if hydra_file.is_file() else None
        )
        key = str(number) if number is not None else str(job_dir.relative_to(directory))
        found[key] = (list(OmegaConf.load(hydra_dir / "overrides.yaml")), _read_results(job_dir))
    multirun = read_multirun(directory)
    grid = job_grid(multirun) if multirun is not None else None
    jobs = []
    for number, lines in enumerate(grid or []):
        key = str(number)
        if key in found:
            lines, read = found.pop(key)
            jobs.append(JobResult(key, *_with_overrides(read, lines)))
        else:
            jobs.append(JobResult(key, MISSING, parse_overrides(lines), None))
    for key, (lines, read) in found.items():  # jobs of another sweeper, or dirs the grid does not name
        jobs.append(JobResult(key, *_with_overrides(read, lines)))
    if not jobs:
        raise ValueError(f"{directory}: neither a run's dir nor a sweep's (no .hydra, results.json or jobs)")
    return jobs


def swept_keys(jobs: list[JobResult]) -> list[str]:
    """The keys whose values differ between the jobs, in the order the sweep names them."""
    keys = list(dict.fromkeys(key for job in jobs for key in job.overrides))
    return [key for key in keys if len({repr(job.overrides.get(key)) for job in jobs}) > 1]


def sort_key(value: Any) -> tuple:
    """Numbers in their order before strings (and None), whatever mixes in one column."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return (1, str(value))
    return (0, value)
