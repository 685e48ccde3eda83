"""Dataset registry: ``dataset=<name>`` on the command line maps to a loader named by an entry point of the
``gcdbench.datasets`` group (the project's own are listed in its pyproject.toml; a package can add its own).

A loader is a function ``(name, dcfg, data_root, n, seed) -> Dataset`` declared with :func:`loader`, which declares
its options once (``option=(default, "one-line help")``) and whether the grammar is highly ambiguous; the run's
config node ``dataset/<name>`` is built from that declaration (``experiments/config.py``), and ``conf/dataset/``
holds presets only (a ``defaults:`` line naming the dataset plus the keys they change).
"""
from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Callable

from gcdbench.datasets.base import DataError, Dataset

GROUP = "gcdbench.datasets"


@dataclass(frozen=True)
class Loader:
    """A dataset loader, the options it reads (option -> one-line help) with their defaults, and whether its
    grammar is highly ambiguous (Table 1's complexity column reads it)."""

    load: Callable[..., Dataset]
    options: dict[str, str]
    defaults: dict = field(default_factory=dict)
    ambiguous: bool = False

    def node(self, name: str) -> dict:
        """The config node of ``dataset=<name>``: its name, ``ambiguous`` and every option at its default."""
        return {"name": name, "ambiguous": self.ambiguous, **self.defaults}

    def __call__(self, name, dcfg, data_root, n=None, seed=0) -> Dataset:
        return self.load(name, dcfg, data_root, n, seed)


def loader(ambiguous: bool = False, **options: tuple):
    """Declare a dataset loader ``(name, dcfg, data_root, n, seed) -> Dataset`` and its options, each once as
    ``option=(default, "one-line help")``; name it in the ``gcdbench.datasets`` entry-point group to make it a
    ``dataset=`` choice. The loader reads ``dcfg[option]``: :func:`load_dataset` fills in the defaults."""
    bad = [k for k, v in options.items() if not (isinstance(v, tuple) and len(v) == 2 and isinstance(v[1], str))]
    if bad:
        raise TypeError(f"dataset options {bad}: declare each as option=(default, \"one-line help\")")
    return lambda fn: Loader(fn, {k: v[1] for k, v in options.items()}, {k: v[0] for k, v in options.items()},
                             ambiguous)


@functools.lru_cache(maxsize=None)
def datasets() -> dict[str, str]:
    """Every registered dataset: name -> ``"package.module:loader"``."""
    found = {ep.name: ep.value for ep in entry_points(group=GROUP)}
    if "custom" not in found:
        raise ValueError(f"no dataset is registered under the entry-point group {GROUP!r} (the project's own are "
                         "listed in its pyproject.toml): reinstall it with `pip install --no-deps -e .`")
    return dict(sorted(found.items()))


def dataset_loader(name: str) -> Loader:
    """The loader registered as ``name``."""
    known = datasets()
    if name not in known:
        raise ValueError(f"unknown dataset {name!r}; valid: {list(known)}")
    module, _, attr = known[name].partition(":")
    got = getattr(importlib.import_module(module), attr, None)
    if not isinstance(got, Loader):
        raise ValueError(f"dataset {name!r}: {known[name]} is not a loader declared with "
                         "gcdbench.datasets.registry.loader")
    return got


def load_dataset(dcfg, data_root, n=None, seed=0) -> Dataset:
    """Load the dataset a ``conf/dataset/*.yaml`` node describes (``name``, loader keys, and ``ambiguous``: the
    grammar is highly ambiguous, which Table 1's complexity column reads from the dataset's meta).

    Unknown options (``+dataset.splt=train``) and a dataset without samples fail here with the valid choices."""
    name = dcfg["name"]
    load = dataset_loader(name)
    valid = [*load.options, "ambiguous"]
    unknown = sorted(set(dcfg) - {"name", *valid})
    if unknown:
        raise DataError(f"dataset {name!r}: unknown option(s) {unknown}; valid: {valid}")
    dcfg = {**load.node(name), **{k: dcfg[k] for k in dcfg}}   # the declared defaults, then the given values
    ds = load(name, dcfg, data_root, n, seed)
    if not ds.samples:
        raise DataError(f"dataset {ds.name!r} has no samples ({ds.meta.get('source', 'its source')}): nothing to run")
    ds.meta["ambiguous"] = bool(dcfg["ambiguous"]) or bool(ds.meta.get("ambiguous"))   # a loader may know better
    return ds


def __getattr__(attr: str):
    """``custom`` and ``load_custom`` at their old address (the ``dataset=custom`` loader moved to
    ``datasets/custom.py``; an install made before the move names ``gcdbench.datasets.registry:custom``): imported
    by name, like every family, so the registry still imports no family."""
    if attr in ("custom", "load_custom"):
        return getattr(importlib.import_module("gcdbench.datasets.custom"), attr)
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")
