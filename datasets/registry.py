"""Dataset registry: ``dataset=<name>`` on the command line maps to a loader here."""
from __future__ import annotations

from pathlib import Path

from gcdbench.datasets.base import Dataset, Sample, pick
from gcdbench.parsers.base import GrammarSpec

DATASETS = ("spider", "spider_spop", "treebank", "sample", "sample_pos", "custom")
#: the grammar suite beyond Table 1 (datasets/suite.py) and the sampled (off-gold) replays (datasets/sampled.py)
SUITE_DATASETS = ("json", "lark", "ambiguous_binary", "ambiguous_ternary", "ambiguous_expr", "ambiguous_concat",
                  "ambiguous_right")
SAMPLED_DATASETS = ("sampled",)


def load_dataset(dcfg, data_root, n=None, seed=0) -> Dataset:
    """Load the dataset a ``conf/dataset/*.yaml`` node describes (``name`` plus loader keys)."""
    name = dcfg["name"]
    if name in ("spider", "spider_spop"):
        from gcdbench.datasets.spider import load_spider

        return load_spider(data_root, split=dcfg.get("split", "dev"),
                           variant="spop" if name == "spider_spop" else "plain", n=n, seed=seed)
    if name == "treebank":
        from gcdbench.datasets.treebank import load_treebank

        return load_treebank(data_root, n=n, seed=seed)
    if name == "sample":
        from gcdbench.datasets.sample import load_sample_sql

        return load_sample_sql(n=n, seed=seed)
    if name == "sample_pos":
        from gcdbench.datasets.sample import load_sample_pos

        return load_sample_pos(n=n, seed=seed)
    if name == "custom":
        return load_custom(dcfg["grammar"], dcfg["samples"], dcfg.get("start", "start"), n, seed)
    if name in SUITE_DATASETS:
        from gcdbench.datasets.suite import load_suite_dataset

        return load_suite_dataset(name, dcfg, n=n, seed=seed)
    if name == "sampled":
        from gcdbench.datasets.sampled import load_sampled

        return load_sampled(dcfg, data_root, n=n, seed=seed)
    raise ValueError(f"unknown dataset {name!r}; valid: {list(DATASETS + SUITE_DATASETS + SAMPLED_DATASETS)}")


def load_custom(grammar_path, samples_path, start="start", n=None, seed=0) -> Dataset:
    """Any ``.lark`` grammar with a text file of samples, one per line (``dataset=custom``)."""
    if not grammar_path or not samples_path:
        raise ValueError("dataset=custom needs dataset.grammar=<file.lark> and dataset.samples=<file, one sample per line>")
    g, s = Path(grammar_path), Path(samples_path)
    for p in (g, s):
        if not p.exists():
            raise FileNotFoundError(f"dataset=custom: no file {p}")
    lines = [ln for ln in s.read_text().splitlines() if ln.strip()]
    samples = [Sample(f"{s.stem}-{i:04d}", ln) for i, ln in enumerate(lines)]
    grammar = GrammarSpec(name=g.stem, lark=g.read_text(), start=start, path=str(g))
    return Dataset(name=f"custom_{g.stem}", grammar=grammar, samples=pick(samples, n, seed), meta={"source": str(s)})
