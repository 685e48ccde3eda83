"""The import contracts of pyproject.toml ([tool.importlinter]: layers import downwards only, no cycles) hold;
`.ci/run` runs `lint-imports` too, this test repeats it for whoever runs pytest alone."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept():
    lint = Path(sys.executable).with_name("lint-imports")
    r = subprocess.run([str(lint), "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]
