"""Experiment runners named by conf/experiment/*.yaml (`runner._target_`), the layer they share, and the
sweep summary.

A runner is `run(cfg, output_dir, name) -> metrics`: through `experiments.harness.job` it checks the composed
config before anything is written, builds the engine, measures its workload `workload.repeats` times on
fresh requests (`experiments.harness.repeats`), and writes `results.json` (with provenance) and one wandb run.
"""
