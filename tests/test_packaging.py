"""Installing gcdbench neither shadows nor overwrites Hugging Face's `datasets`; both import side by side."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_both_datasets_packages_import_from_the_repo_root():
    code = ("import datasets, gcdbench.datasets.base as ours; "
            "assert hasattr(datasets, 'load_dataset'), datasets.__file__; "
            "assert 'site-packages' in datasets.__file__; "
            "print(datasets.__file__, ours.__file__)")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert str(REPO / "datasets") in r.stdout


def test_no_top_level_package_named_datasets_in_our_distribution():
    from importlib import metadata

    files = [str(f) for f in metadata.files("gcdbench") or []]
    assert not any(f.startswith("datasets/") for f in files), files
