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


def test_wheel_installs_only_the_gcdbench_package(tmp_path):
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                        str(tmp_path), str(REPO)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    import zipfile

    (wheel,) = tmp_path.glob("gcdbench-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.startswith("gcdbench/datasets/") for n in names)
    assert all(n.startswith(("gcdbench/", "gcdbench-")) for n in names), [n for n in names if "/" in n][:5]
    # every shipped grammar and embedded sample file is inside the wheel (the package-data globs)
    shipped = [p.relative_to(REPO).as_posix() for d in ("datasets/grammars", "datasets/sample")
               for p in sorted((REPO / d).iterdir()) if p.is_file()]
    assert "datasets/grammars/spider.lark" in shipped
    missing = [f for f in shipped if "gcdbench/" + f not in names]
    assert not missing, missing
