"""numba keys its on-disk cache by the file a function is defined in only, so a caller keeps the machine code it
inlined from a callee in another file after the callee changed. ``targets.stamp_cache_with(folder)`` keys the
cache of a folder's functions by their file and every file of the folder it imports, directly or not
(``targets.cache_sources``; Valiant's and Pre3's packages call it): a changed callee recompiles its caller, an
unchanged tree loads from the cache, and a file the kernel's file does not import (an engine) keys nothing."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

RUN = ("import json, stamppkg.caller as c; v = c.call(); "
       "print(json.dumps([v, c.call.stats.cache_hits.most_common(), c.call.stats.cache_misses.most_common()]))")


def _stamped_package(tmp: Path) -> Path:
    """An empty package ``stamppkg`` under ``tmp`` whose ``__init__`` keys its kernels' cache by its folder."""
    pkg = tmp / "stamppkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("import os\nfrom gcdbench.parsers.targets import stamp_cache_with\n"
                                     "stamp_cache_with(os.path.dirname(__file__))\n")
    return pkg


def _run(tmp: Path) -> list:
    import json

    env = {**os.environ, "PYTHONPATH": f"{tmp}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env.pop("NUMBA_CACHE_DIR", None)      # the in-tree cache, beside the sources in tmp
    r = subprocess.run([sys.executable, "-c", RUN], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_a_changed_callee_rebuilds_its_caller(tmp_path):
    pkg = _stamped_package(tmp_path)
    (pkg / "callee.py").write_text("import numba\n\n@numba.njit(cache=True)\ndef value():\n    return 1\n")
    (pkg / "caller.py").write_text(textwrap.dedent("""\
        import numba
        from .callee import value

        @numba.njit(cache=True)
        def call():
            return value() + 0
        """))
    value, hits, misses = _run(tmp_path)
    assert value == 1 and not hits and misses            # first run: compiled and saved
    value, hits, misses = _run(tmp_path)
    assert value == 1 and hits and not misses            # unchanged: loaded from the cache
    (pkg / "callee.py").write_text("import numba\n\n@numba.njit(cache=True)\ndef value():\n    return 20 + 2\n")
    value, hits, misses = _run(tmp_path)
    assert value == 22 and not hits and misses           # the caller's file is unchanged, yet it is rebuilt


def test_valiant_and_pre3_kernels_are_stamped():
    from numba.core import caching

    import gcdbench.parsers.pre3.kernels as pk
    import gcdbench.parsers.pre3.sort_kernels as ps
    import gcdbench.parsers.valiant.cpu_mask as vm
    import gcdbench.parsers.valiant.device as vd
    import gcdbench.parsers.valiant.device_search as vs
    import gcdbench.parsers.valiant.packing as vp
    import gcdbench.parsers.valiant.store_kernels as vk
    import gcdbench.parsers.valiant.store_mask as vh
    from gcdbench.parsers import targets

    for mod in (vd, vs, vp, vm, vk, vh, pk, ps):
        assert os.path.dirname(os.path.abspath(mod.__file__)) in targets._STAMPED
    impl = getattr(caching, "CacheImpl", None) or caching._CacheImpl
    assert getattr(impl._locator_classes[0], "_gcdbench_stamped", False)
    assert str(ROOT / "parsers" / "targets.py") in targets._STAMPED[str(ROOT / "parsers" / "valiant")]


def test_a_callee_two_imports_away_rebuilds_its_caller_and_an_engine_keys_nothing(tmp_path):
    """The caller imports the callee through a module that re-exports it (as Valiant's kernels import each other);
    a file of the package that imports the caller but that the caller's file does not import (an engine) can
    change without a rebuild."""
    pkg = _stamped_package(tmp_path)
    (pkg / "callee.py").write_text("import numba\n\n@numba.njit(cache=True, inline='always')\ndef value():\n"
                                   "    return 1\n")
    (pkg / "mid.py").write_text("from stamppkg.callee import value  # noqa: F401\n")
    (pkg / "caller.py").write_text(textwrap.dedent("""\
        import numba
        from .mid import value

        @numba.njit(cache=True)
        def call():
            return value() + 0
        """))
    (pkg / "engine.py").write_text("from .caller import call  # noqa: F401\nLIMIT = 1\n")
    value, hits, misses = _run(tmp_path)
    assert value == 1 and not hits and misses            # first run: compiled and saved
    (pkg / "engine.py").write_text("from .caller import call  # noqa: F401\nLIMIT = 2\n")
    value, hits, misses = _run(tmp_path)
    assert value == 1 and hits and not misses            # the engine changed: loaded from the cache all the same
    (pkg / "callee.py").write_text("import numba\n\n@numba.njit(cache=True, inline='always')\ndef value():\n"
                                   "    return 20 + 2\n")
    value, hits, misses = _run(tmp_path)
    assert value == 22 and not hits and misses           # the callee, two imports away, changed: rebuilt


def test_a_kernel_is_keyed_by_the_files_it_imports():
    import gcdbench.parsers.pre3  # noqa: F401  (registers its folder)
    import gcdbench.parsers.valiant  # noqa: F401
    from gcdbench.parsers import targets

    def names(path):
        return {Path(p).name for p in targets.cache_sources(str(ROOT / "parsers" / path))}

    mask = names("valiant/cpu_mask.py")
    assert {"cpu_mask.py", "device.py", "device_search.py", "packing.py", "store_kernels.py", "targets.py"} <= mask
    assert not mask & {"engine.py", "store_mask.py", "cuda_kernels.py", "README.md"}
    assert {"cpu_mask.py", "store_kernels.py", "device.py"} <= names("valiant/store_mask.py")
    assert names("valiant/device.py") == {"device.py", "targets.py"}
    assert {"sort_kernels.py", "kernels.py", "targets.py"} <= names("pre3/sort_kernels.py")
    assert "engine.py" not in names("pre3/kernels.py")
