"""The one loader a stage uses for ``--grid DIR``: the grid folder's checked, typed config."""
from __future__ import annotations

import argparse
import json

from grid.config import ConfigError, validate
from grid.folder import GridDir
from grid.settings import Config


def load_grid(parser: argparse.ArgumentParser, folder: str):
    """The checked, typed config (grid.settings.Config) of the grid folder ``folder``, from its
    config.json (the workflow's grid_config rule writes it), before any work. A folder that is not a
    grid's, a damaged config.json, another grid's config.json (a copied or foreign folder) and a config
    that fails its checks are refused, naming the file. A moved grid folder is read where it lies,
    whatever results_dir its file recorded."""
    grid = GridDir(folder)
    path = grid.config_path
    if not path.is_file():
        parser.error(f"--grid {folder}: {path} does not exist: not a grid folder (<results_dir>/<grid>, "
                     "made by the workflow)")
    try:
        config = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        parser.error(f"{path}: not valid JSON ({error})")
    if not isinstance(config, dict):
        parser.error(f"{path}: expected a JSON object, got {type(config).__name__}")
    if config.get("grid") != grid.path.resolve().name:
        parser.error(f"{path}: the config of grid {config.get('grid')!r}, not of this folder "
                     f"{grid.path.resolve().name!r}: a grid folder holds its own grid's config")
    config["results_dir"] = str(grid.path.resolve().parent)
    try:
        return Config.build(validate(config))
    except (ConfigError, ValueError, KeyError) as error:
        parser.error(f"{path}: {error}")

