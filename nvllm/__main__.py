"""`python -m nvllm COMMAND ...`: the `nvllm` command without its console script (no shell completion)."""

from nvllm.cli import main

main()
