"""Command line: ``python -m experiments.run engine=xgrammar dataset=spider samples=30``.

A thin ``@hydra.main`` wrapper around :func:`gcdbench.experiments.runner.run`; tests call ``run`` directly.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from gcdbench.experiments.config import register

CONF_DIR = str(Path(__file__).resolve().parents[1] / "conf")
register()


@hydra.main(config_path=CONF_DIR, config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    from hydra.utils import get_original_cwd, to_absolute_path

    from gcdbench.datasets.base import DataMissing
    from gcdbench.experiments.report import cell_summary
    from gcdbench.experiments.runner import run

    cfg.data_root = to_absolute_path(cfg.data_root)
    cfg.out_dir = to_absolute_path(cfg.out_dir)
    try:
        out = run(cfg)
    except (DataMissing, FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    if cfg.report:
        print(cell_summary(out))


if __name__ == "__main__":
    main()
