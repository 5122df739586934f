"""Triton kernels compiled for Hopper (sm_90) on a machine without a GPU, and their machine code read back:
the instructions of a kernel's main loop by opcode, its registers and shared memory, from Triton's own
ptxas, nvdisasm and cuobjdump. What a loop iteration costs in instructions, against the bytes it reads;
instructions are not time, so this says where to look and the GPU's benchmarks say what pays."""

from __future__ import annotations

import collections
import re
import subprocess
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

HOPPER = GPUTarget("cuda", 90, 32)
SASS_LINE = re.compile(r"\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)")
LABEL = re.compile(r"\.(L_x_\d+):")
BRANCH = re.compile(r"BRA `?\(?\.?(L_x_\d+)")


def compile_for_hopper(
    fn,
    signature: dict[str, str],
    constants: dict[str, object],
    aligned: tuple[str, ...],
    num_warps: int,
    num_stages: int,
):
    """`fn` compiled for sm_90: `signature` the types of its runtime arguments in order (`"*bf16"`, `"i32"`),
    `constants` its constexprs, `aligned` the arguments a launch on real tensors finds 16-byte aligned (or
    divisible by 16), as Triton specializes them."""
    signature = {**signature, **dict.fromkeys(constants, "constexpr")}
    names = list(signature)
    # Triton matches them by position: a name left out or out of order would compile another kernel
    if names != fn.arg_names:
        raise ValueError(f"{fn.__name__} takes {fn.arg_names}, given {names}")
    source = ASTSource(
        fn=fn,
        signature=signature,
        constexprs={(names.index(name),): value for name, value in constants.items()},
        attrs={(names.index(name),): [["tt.divisibility", 16]] for name in aligned},
    )
    return triton.compile(source, target=HOPPER, options={"num_warps": num_warps, "num_stages": num_stages})


def nvidia_tool(name: str) -> str:
    return str(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name)


def disassemble(cubin: bytes, directory: Path) -> tuple[str, str]:
    """The cubin's SASS and its resource usage (registers, shared memory), by Triton's own tools."""
    path = directory / "kernel.cubin"
    path.write_bytes(cubin)
    sass = subprocess.run(
        [nvidia_tool("nvdisasm"), "-c", str(path)], capture_output=True, text=True, check=True
    )
    usage = subprocess.run(
        [nvidia_tool("cuobjdump"), "--dump-resource-usage", str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    return sass.stdout, usage.stdout


def resource_usage(usage: str) -> dict[str, int]:
    """`disassemble`'s resource usage as numbers by name: `REG` (registers a thread), `SHARED` (bytes of
    static shared memory), `LOCAL` (bytes of local memory a thread: spills), ..."""
    return {name: int(value) for name, value in re.findall(r"\b([A-Z]+(?:\[\d+\])?):(\d+)", usage)}


def main_loop_lines(sass: str) -> list[str]:
    """The lines between the longest backward branch and its target (the main loop), none if no branch
    goes back."""
    lines = sass.splitlines()
    labels = {match.group(1): i for i, line in enumerate(lines) if (match := LABEL.match(line.strip()))}
    loop = None
    for i, line in enumerate(lines):
        match = BRANCH.search(line)
        if match and labels.get(match.group(1), i) < i:
            start = labels[match.group(1)]
            if loop is None or i - start > loop[1] - loop[0]:
                loop = (start, i)
    return [] if loop is None else lines[loop[0] : loop[1] + 1]


def main_loop_instructions(sass: str) -> collections.Counter:
    """The instructions of the main loop (`main_loop_lines`) by opcode."""
    return collections.Counter(
        match.group(1) for line in main_loop_lines(sass) if (match := SASS_LINE.match(line))
    )
