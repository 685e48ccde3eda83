"""Small datasets shipped inside the project, for runs and tests that need no downloaded data."""
from __future__ import annotations

from pathlib import Path

from gcdbench.datasets.base import Dataset, Sample, load_grammar, pick

SAMPLE_DIR = Path(__file__).parent / "sample"


# --------------------------------------------------------------------------------------------------
# SQL: Spider-style queries on an invented orchestra database, with the Spider grammar
# --------------------------------------------------------------------------------------------------
SQL_FILE = SAMPLE_DIR / "queries.sql"


def load_sample_sql(n: int | None = None, seed: int = 0) -> Dataset:
    """``datasets/sample/queries.sql`` (one query per line) with ``grammar=spider``; ids ``sql-0000``...

    The queries were written for this project in the style of Spider's gold SQL, on a made-up schema
    (musician, orchestra, conductor, membership, concert, hall, piece, program). All of them parse.
    """
    lines = [ln for ln in SQL_FILE.read_text(encoding="utf-8").splitlines() if ln.strip()]
    samples = [Sample(f"sql-{i:04d}", ln) for i, ln in enumerate(lines)]
    meta = {"source": str(SQL_FILE), "n_lines": len(lines), "schema": "invented (orchestra database)"}
    return Dataset(name="sample", grammar=load_grammar("spider"), samples=pick(samples, n, seed), meta=meta)


# --------------------------------------------------------------------------------------------------
# POS tags: a small hand-written, ambiguous grammar over Penn Treebank tags (the TreeBank dataset's terminals)
# --------------------------------------------------------------------------------------------------
POS_FILE = SAMPLE_DIR / "pos_sentences.txt"


def load_sample_pos(n: int | None = None, seed: int = 0) -> Dataset:
    """``datasets/sample/pos_sentences.txt`` (one space-separated POS-tag sequence per line) with
    ``grammar=sample_pos``; ids ``pos-0000``...

    Grammar and sentences were written for this project. The grammar is ambiguous on purpose (PP attachment,
    coordination, relative clauses) and writes its terminals as the induced TreeBank grammar does
    (``PRP_S: "PRP$"``, ``%ignore " "``), so it needs no downloaded data. All sentences are in its language.
    """
    lines = [ln for ln in POS_FILE.read_text(encoding="utf-8").splitlines() if ln.strip()]
    samples = [Sample(f"pos-{i:04d}", ln) for i, ln in enumerate(lines)]
    lengths = [len(ln.split()) for ln in lines]
    meta = {"source": str(POS_FILE), "n_lines": len(lines), "sample_len_mean": round(sum(lengths) / len(lengths), 2),
            "sample_len_max": max(lengths)}
    return Dataset(name="sample_pos", grammar=load_grammar("sample_pos"), samples=pick(samples, n, seed), meta=meta)


# -- registration (pyproject.toml, entry-point group gcdbench.datasets) --------------------------------------
from gcdbench.datasets.registry import loader  # noqa: E402 - the registry imports this module lazily, by name


@loader()
def sample(name, dcfg, data_root, n, seed) -> Dataset:
    return load_sample_sql(n=n, seed=seed)


@loader(ambiguous=True)
def sample_pos(name, dcfg, data_root, n, seed) -> Dataset:
    return load_sample_pos(n=n, seed=seed)
