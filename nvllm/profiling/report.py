"""The profiler's printable summary: a table of the host stages and the device time, then the memory."""

from __future__ import annotations

GIB = 2**30
HEADER = ("", "count", "total s", "mean ms", "p50 ms", "p99 ms", "share")
DEVICE_NAMES = {"prefill": "prefill step", "decode": "decode round"}
MEMORY_NAMES = {
    "weights_bytes": "weights",
    "kv_cache_bytes": "KV cache",
    "cuda_graph_pool_bytes": "CUDA-graph pools",
    "activation_peak_bytes": "activation peak",
    "peak_allocated_bytes": "peak allocated",
}


def _row(name: str, stats: dict) -> tuple[str, ...]:
    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:.3f}"

    return (
        name,
        str(stats["count"]),
        f"{stats['total_s']:.3f}",
        ms(stats["mean_ms"]),
        ms(stats["p50_ms"]),
        ms(stats["p99_ms"]),
        f"{stats['share']:.1%}",
    )


def format_table(rows: list[tuple[str, ...]]) -> list[str]:
    """Rows of cells (the first row the header) as aligned lines: the first column left, the rest right."""
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return [
        "  ".join(
            cell.ljust(width) if column == 0 else cell.rjust(width)
            for column, (cell, width) in enumerate(zip(row, widths))
        )
        for row in rows
    ]


def format_summary(profile: dict) -> str:
    """`Profiler.as_dict()` as a table (str)."""
    rows = [HEADER]
    rows += [_row(f"host: {stage}", stats) for stage, stats in profile["stages"].items() if stats["count"]]
    total = sum(stats["total_s"] for stats in profile["stages"].values())
    rows.append(("host: total", "", f"{total:.3f}", "", "", "", f"{1.0 if total else 0.0:.1%}"))
    rows += [_row(f"device: {DEVICE_NAMES[kind]}", stats) for kind, stats in profile["device"].items()]
    lines = format_table(rows)
    memory = ", ".join(
        f"{MEMORY_NAMES[key]} {'n/a' if value is None else f'{value / GIB:.3f} GiB'}"
        for key, value in profile["memory"].items()
    )
    return "\n".join(
        [
            f"Profile of {profile['wall_s']:.3f} s (shares of that wall time)",
            *lines,
            f"Memory (rank 0): {memory}",
        ]
    )
