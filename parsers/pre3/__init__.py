"""gcdbench.parsers.pre3"""
import os as _os

from gcdbench.parsers.targets import stamp_cache_with as _stamp

# numba's cache of the kernels here is keyed by every source they are built from (this folder and the shared
# primitives), so a callee changed in one file recompiles its callers in the others
_stamp(_os.path.dirname(__file__), _os.path.join(_os.path.dirname(_os.path.dirname(__file__)), "targets.py"))
