"""Hydra finds launchers by listing the folders of the `hydra_plugins` namespace package (pkgutil). An
editable install (`pip install -e .`) maps nvllm's launcher package through an import finder that such a
listing cannot see, so `hydra/launcher=ray` would silently be the published launcher's: the folder that
holds nvllm's is put on the namespace's path before Hydra scans it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

PLUGIN_PACKAGE = "hydra_plugins.nvllm_ray_launcher"


def expose_hydra_plugins() -> None:
    try:
        import hydra_plugins
    except ImportError:  # no launcher plugin anywhere: nothing to expose
        return
    spec = importlib.util.find_spec(PLUGIN_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return
    folder = str(Path(next(iter(spec.submodule_search_locations))).parent)
    if folder not in list(hydra_plugins.__path__):
        hydra_plugins.__path__.append(folder)
