"""Dataset registry: ``dataset=<name>`` on the command line maps to a loader here."""
from __future__ import annotations

from pathlib import Path

from gcdbench.datasets.base import DataError, Dataset, Sample, pick, read_text
from gcdbench.parsers.base import GrammarSpec

#: every dataset and the options its ``conf/dataset/<name>.yaml`` may set (besides ``name`` and ``ambiguous``)
DATASET_OPTIONS: dict[str, tuple[str, ...]] = {
    "spider": ("split",), "spider_spop": ("split",), "treebank": (), "sample": (), "sample_pos": (),
    "custom": ("grammar", "samples", "start"),
    # the grammar suite beyond Table 1 (datasets/suite.py) and the sampled (off-gold) replays (datasets/sampled.py)
    "json": ("max_tokens", "min_tokens", "per_file"), "lark": ("max_tokens",),
    **{f"ambiguous_{k}": ("lengths",) for k in ("binary", "ternary", "expr", "concat", "right")},
    "sampled": ("source", "tokenizer", "file"),
    # seeded random grammars and sentences of chosen lengths (datasets/fuzz.py)
    "fuzz": ("grammar_seed", "lengths", "per_length"),
}
DATASETS = tuple(DATASET_OPTIONS)
SUITE_DATASETS = ("json", "lark", "ambiguous_binary", "ambiguous_ternary", "ambiguous_expr", "ambiguous_concat",
                  "ambiguous_right")


def load_dataset(dcfg, data_root, n=None, seed=0) -> Dataset:
    """Load the dataset a ``conf/dataset/*.yaml`` node describes (``name``, loader keys, and ``ambiguous``: the
    grammar is highly ambiguous, which Table 1's complexity column reads from the dataset's meta).

    Unknown options (``+dataset.splt=train``) and a dataset without samples fail here with the valid choices."""
    name = dcfg["name"]
    if name not in DATASET_OPTIONS:
        raise ValueError(f"unknown dataset {name!r}; valid: {list(DATASETS)}")
    valid = [*DATASET_OPTIONS[name], "ambiguous"]
    unknown = sorted(set(dcfg) - {"name", *valid})
    if unknown:
        raise DataError(f"dataset {name!r}: unknown option(s) {unknown}; valid: {valid}")
    ds = _load(dcfg, data_root, n, seed)
    if not ds.samples:
        raise DataError(f"dataset {ds.name!r} has no samples ({ds.meta.get('source', 'its source')}): nothing to run")
    ds.meta["ambiguous"] = bool(dcfg.get("ambiguous", False))
    return ds


def _load(dcfg, data_root, n, seed) -> Dataset:
    name = dcfg["name"]
    if name in ("spider", "spider_spop"):
        from gcdbench.datasets.spider import load_spider

        ds = load_spider(data_root, split=dcfg.get("split", "dev"),
                         variant="spop" if name == "spider_spop" else "plain", n=n, seed=seed)
    elif name == "treebank":
        from gcdbench.datasets.treebank import load_treebank

        ds = load_treebank(data_root, n=n, seed=seed)
    elif name == "sample":
        from gcdbench.datasets.sample import load_sample_sql

        ds = load_sample_sql(n=n, seed=seed)
    elif name == "sample_pos":
        from gcdbench.datasets.sample import load_sample_pos

        ds = load_sample_pos(n=n, seed=seed)
    elif name in SUITE_DATASETS:
        from gcdbench.datasets.suite import load_suite_dataset

        ds = load_suite_dataset(name, dcfg, n=n, seed=seed)
    elif name == "sampled":
        from gcdbench.datasets.sampled import load_sampled

        ds = load_sampled(dcfg, data_root, n=n, seed=seed)
    elif name == "fuzz":
        from gcdbench.datasets.fuzz import load_fuzz_dataset

        ds = load_fuzz_dataset(dcfg, n=n, seed=seed)
    else:
        ds = load_custom(dcfg["grammar"], dcfg["samples"], dcfg.get("start", "start"), n, seed)
    return ds


def load_custom(grammar_path, samples_path, start="start", n=None, seed=0) -> Dataset:
    """Any ``.lark`` grammar with a text file of samples, one per line (``dataset=custom``)."""
    if not grammar_path or not samples_path:
        raise ValueError("dataset=custom needs dataset.grammar=<file.lark> and dataset.samples=<file, one sample per line>")
    g, s = Path(grammar_path), Path(samples_path)
    for p in (g, s):
        if not p.exists():
            raise FileNotFoundError(f"dataset=custom: no file {p}")
    lines = [ln for ln in read_text(s, "samples file").splitlines() if ln.strip()]
    if not lines:
        raise DataError(f"dataset=custom: samples file {s} has no non-empty line; write one sample per line")
    samples = [Sample(f"{s.stem}-{i:04d}", ln) for i, ln in enumerate(lines)]
    grammar = GrammarSpec(name=g.stem, lark=read_text(g, "grammar"), start=start, path=str(g))
    return Dataset(name=f"custom_{g.stem}", grammar=grammar, samples=pick(samples, n, seed), meta={"source": str(s)})
