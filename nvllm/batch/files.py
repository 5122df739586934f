"""A batch's files: the input's rows (JSONL or Parquet) with their ids, and the output dir of part files.

Every part file is written whole under a temporary name and then renamed, so that a run stopped at any
moment leaves only complete parts: the rows of the parts are the rows done, and a run started again with
the same output writes only the others."""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path

from nvllm.batch.rows import ID_COLUMN, check_columns

FORMATS = ("jsonl", "parquet")
PART_PREFIX = "part-"


def file_format(path: Path) -> str:
    suffix = path.suffix.lstrip(".")
    if suffix not in FORMATS:
        raise ValueError(f"{path}: a .jsonl or .parquet file is expected")
    return suffix


def _pyarrow_parquet():
    try:
        import pyarrow.parquet
    except ImportError:
        raise ValueError('Parquet files need pyarrow: pip install -e ".[ray]"') from None
    return pyarrow.parquet


def _jsonl_rows(path: Path) -> list[dict]:
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}, line {number}: no JSON ({error})") from None
        if not isinstance(row, dict):
            raise ValueError(f"{path}, line {number}: a JSON object is expected, got {row!r}")
        rows.append(row)
    return rows


def _file_rows(path: Path) -> list[dict]:
    if file_format(path) == "jsonl":
        return _jsonl_rows(path)
    return _pyarrow_parquet().read_table(path).to_pylist()


def read_input(path: str | Path) -> list[dict]:
    """The input's rows, each with an `id`: its own, or its position in the file (0, 1, ...) when the file
    has no id column. Ids must be unique: they are what a resumed run knows a done row by."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"batch.input={str(path)!r}: no such file")
    rows = _file_rows(path)
    if not rows:
        raise ValueError(f"batch.input={str(path)!r} holds no rows")
    check_columns({key for row in rows for key in row}, str(path))
    with_id = sum(row.get(ID_COLUMN) is not None for row in rows)
    if with_id == 0:
        return [{ID_COLUMN: position, **row} for position, row in enumerate(rows)]
    if with_id < len(rows):
        raise ValueError(f"{path}: {len(rows) - with_id} of {len(rows)} rows have no id (all or none may)")
    seen: set = set()
    for row in rows:
        if row[ID_COLUMN] in seen:
            raise ValueError(f"{path}: id {row[ID_COLUMN]!r} is on more than one row")
        seen.add(row[ID_COLUMN])
    return rows


class OutputDir:
    """The output dir's part files: read back for the ids done, added to one batch of rows at a time."""

    def __init__(self, path: str | Path, output_format: str):
        if output_format not in FORMATS:
            raise ValueError(f"batch.format={output_format!r} must be one of {FORMATS}")
        self.path = Path(path)
        self.format = output_format
        # unique to this writer: two runs into one dir never name a part alike
        self.run_stamp = f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"
        self.parts_written = 0

    def parts(self) -> list[Path]:
        return sorted(part for suffix in FORMATS for part in self.path.glob(f"{PART_PREFIX}*.{suffix}"))

    def rows(self) -> list[dict]:
        return [row for part in self.parts() for row in _file_rows(part)]

    def done_ids(self) -> set:
        return {row[ID_COLUMN] for row in self.rows()}

    def write(self, rows: list[dict]) -> Path:
        """One part file of `rows`, complete or absent."""
        self.path.mkdir(parents=True, exist_ok=True)
        name = f"{PART_PREFIX}{self.run_stamp}-{self.parts_written:05d}.{self.format}"
        final, temporary = self.path / name, self.path / f".{name}.tmp"
        if self.format == "jsonl":
            temporary.write_text("".join(json.dumps(row) + "\n" for row in rows))
        else:
            import pyarrow

            _pyarrow_parquet().write_table(pyarrow.Table.from_pylist(rows), temporary)
        os.replace(temporary, final)
        self.parts_written += 1
        return final
