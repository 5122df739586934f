"""Each `Sequence` field set after construction has one writer (a module), found by reading nvllm/ with `ast`:
every `x.field = ...`, `x.field += ...` and `x.field.append(...)`-style call on an object other than `self`
(an object's own attributes: the Sequence's constructor, and other classes' fields of the same name)."""

import ast
from collections import defaultdict
from pathlib import Path

import nvllm

PACKAGE = Path(nvllm.__file__).parent
MUTATORS = {"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse"}
# names under which nvllm/ writes objects that are not sequences but have fields named like a Sequence's
OTHER_OBJECTS = {"self", "block"}  # `block`: a KV block's `token_ids`

BLOCK_MANAGER = "nvllm.scheduler.block_manager"
POSTPROCESS = "nvllm.scheduler.postprocess"
OWNERS = {
    "status": "nvllm.scheduler.lifecycle",
    "token_row": "nvllm.scheduler.token_rows",
    "computed_len": BLOCK_MANAGER,
    "cached_len": BLOCK_MANAGER,
    "block_table": BLOCK_MANAGER,
    "num_registered_blocks": BLOCK_MANAGER,
    "block_hashes": BLOCK_MANAGER,
    "token_ids": POSTPROCESS,
    "num_in_flight_tokens": POSTPROCESS,
    "forks": POSTPROCESS,
    "logprobs": POSTPROCESS,
    "prompt_logprobs": POSTPROCESS,
    "finish_reason": POSTPROCESS,
    "stop_reason": POSTPROCESS,
    "first_scheduled_time": "nvllm.scheduler.lifecycle",
    "first_token_time": POSTPROCESS,
    "finished_time": POSTPROCESS,
    "detokenizer": "nvllm.engine.request_outputs",
    "penalty_history": "nvllm.sampling.request_processing",
    "bad_words_history": "nvllm.sampling.bad_words",
    "grammar": "nvllm.engine.structured_outputs",
}  # the others (seq_id, priority, num_prompt_tokens, sampling_params, generator, arrival_time): constructor's


def sequence_fields() -> set[str]:
    tree = ast.parse((PACKAGE / "scheduler" / "sequence.py").read_text())
    init = next(
        node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name == "__init__"
    )
    return {
        target.attr
        for node in ast.walk(init)
        for target in getattr(node, "targets", [getattr(node, "target", None)])
        if isinstance(target, ast.Attribute)
    }


def written_attribute(node: ast.AST) -> ast.Attribute | None:
    """The attribute `node` writes, if any: an assignment's target or the object of a mutating call."""
    if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
        return node
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
        return node.func.value if isinstance(node.func.value, ast.Attribute) else None
    return None


def writers(fields: set[str]) -> dict[str, set[str]]:
    found = defaultdict(set)
    for path in PACKAGE.rglob("*.py"):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text())):
            attribute = written_attribute(node)
            if attribute is None or attribute.attr not in fields:
                continue
            if isinstance(attribute.value, ast.Name) and attribute.value.id in OTHER_OBJECTS:
                continue
            found[attribute.attr].add(module)
    return found


def test_the_scan_finds_writes_of_each_kind():
    source = "seq.status = 1\nseq.computed_len += 2\nseq.token_ids.extend([3])\nself.status = 4\n"
    written = [written_attribute(node) for node in ast.walk(ast.parse(source))]
    assert sorted(attr.attr for attr in written if attr is not None) == [
        "computed_len",
        "status",
        "status",
        "token_ids",
    ]


def test_every_sequence_field_has_one_writer():
    fields = sequence_fields()
    assert set(OWNERS) <= fields, "a field named here is no longer a Sequence's"
    found = writers(fields)
    several = {field: sorted(modules) for field, modules in found.items() if len(modules) > 1}
    assert not several, f"fields with several writers: {several}"
    assert {field: modules.pop() for field, modules in found.items()} == OWNERS


def test_the_scheduler_emits_records_and_never_imports_the_profiler():
    for path in (PACKAGE / "scheduler").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            assert not any(name.startswith("nvllm.profiling") for name in names), path.name
