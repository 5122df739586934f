"""nvllm's Hydra launcher for Ray: `-m hydra/launcher=ray` runs every job of a sweep as a Ray task that
reserves the job's tensor-parallel size in GPUs (gpu_sized_launcher.py). Hydra finds launchers only in the
`hydra_plugins` namespace package, hence this folder at the top of the tree."""
