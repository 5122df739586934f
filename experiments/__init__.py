"""Experiment runners named by conf/experiment/*.yaml (`runner._target_`), and the sweep summary callback.

A runner is `run(cfg, output_dir, name) -> metrics`: it builds the engine from the composed config, runs
its workload, writes `results.json` into the job's output dir and logs one wandb run.
"""
