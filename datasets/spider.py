"""Spider 1.0 gold SQL queries with the project's Spider grammars (``spider.lark`` and its sp-op variant).

``load_spider`` reads ``<data_root>/spider/{split}_gold.sql`` (``SQL<TAB>db_id`` per line), keeps each distinct
query once in file order, drops the queries that are not sentences of the grammar's language as the harness
defines it (the scannerless reference checker, so no engine's lexer decides; they are listed in ``meta``) and
picks ``n`` of the rest. For ``variant="spop"`` every query is first rewritten by :func:`to_spop`.
"""
from __future__ import annotations

import functools
from pathlib import Path

from gcdbench.datasets.base import Dataset, Sample, data_file, load_grammar, pick, read_text

VARIANTS = {"plain": ("spider", "spider"), "spop": ("spider_spop", "spider_spop")}   # variant -> (dataset, grammar)
SPLITS = ("dev", "train")

#: characters that the sp-op form wants followed by whitespace
SPOP_CHARS = frozenset("+-*/,;")
#: what counts as whitespace, here and in the grammars' WS terminal
WHITESPACE = frozenset(" \t\r\n")


def to_spop(sql: str) -> str:
    """``sql`` in sp-op form: one space inserted after each of ``+ - * / , ;`` outside string literals when the
    character is not already followed by whitespace (end of text included). Idempotent.

    String literals are ``'...'`` and ``"..."`` with no escapes (SQL's doubled quote ``'it''s'`` reads as two
    adjacent literals, which leaves its inside untouched too); an unterminated literal runs to the end.
    """
    out: list[str] = []
    quote = None
    n = len(sql)
    for i, ch in enumerate(sql):
        out.append(ch)
        if quote is not None:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch in SPOP_CHARS and (i + 1 == n or sql[i + 1] not in WHITESPACE):
            out.append(" ")
    return "".join(out)


@functools.lru_cache(maxsize=None)
def lalr_parser(grammar_name: str):
    """The Lark LALR(1) parser of a shipped grammar, built once per process."""
    import lark

    spec = load_grammar(grammar_name)
    return lark.Lark(spec.lark, start=spec.start, parser="lalr")


def grammar_stats(grammar_name: str) -> dict:
    """Sizes of a shipped grammar as Lark sees it (rules after Lark's expansion of [..], (..)* and |)."""
    parser = lalr_parser(grammar_name)
    return {
        "grammar": grammar_name,
        "n_rules": len(parser.rules),
        "n_nonterminals": len({r.origin.name for r in parser.rules}),
        "n_terminals": len(parser.terminals),   # including the ignored WS
    }


@functools.lru_cache(maxsize=None)
def language(grammar_name: str):
    """The reference checker of a shipped grammar (the harness's language), built once per process."""
    from gcdbench.parsers.reference import ReferenceChecker

    return ReferenceChecker(load_grammar(grammar_name))


def in_language(grammar_name: str, text: str) -> bool:
    """Whether ``text`` is a sentence of the grammar in the harness's (scannerless) reading."""
    return language(grammar_name).is_sentence(text.encode("utf-8"))


def parses(grammar_name: str, text: str) -> bool:
    """Whether Lark's LALR parser of the grammar accepts ``text`` (the grammars are kept LALR(1) for PSC;
    tests compare this with :func:`in_language`, which is what selects samples)."""
    from lark.exceptions import LarkError

    try:
        lalr_parser(grammar_name).parse(text)
    except LarkError:
        return False
    return True


def read_gold(data_root: str | Path, split: str = "dev") -> list[tuple[str, str]]:
    """``(sql, db_id)`` for every line of ``<data_root>/spider/{split}_gold.sql``, in file order."""
    if split not in SPLITS:
        raise ValueError(f"unknown Spider split {split!r}; valid: {list(SPLITS)}")
    path = data_file(data_root, "spider", f"{split}_gold.sql")
    rows = []
    for line in read_text(path, "Spider gold file").splitlines():
        if not line.strip():
            continue
        sql, _, db_id = line.partition("\t")
        rows.append((sql, db_id.strip()))
    return rows


def load_spider(data_root: str | Path, split: str = "dev", variant: str = "plain", n: int | None = None,
                seed: int = 0) -> Dataset:
    """Distinct gold queries of a Spider split that are sentences of the grammar, as a :class:`Dataset`.

    Sample ids are ``<split>-<index>`` with the index in the list of distinct queries (before dropping), so an
    id names the same query whatever ``n``, ``seed`` or variant. Raises :class:`DataMissing` when the file is
    not under ``data_root``.
    """
    if variant not in VARIANTS:
        raise ValueError(f"unknown Spider variant {variant!r}; valid: {list(VARIANTS)}")
    name, grammar_name = VARIANTS[variant]
    rows = read_gold(data_root, split)
    distinct: list[str] = list(dict.fromkeys(sql for sql, _ in rows))
    samples, dropped = [], []
    for i, sql in enumerate(distinct):
        text = to_spop(sql) if variant == "spop" else sql
        sid = f"{split}-{i:04d}"
        if in_language(grammar_name, text):
            samples.append(Sample(sid, text))
        else:
            dropped.append({"id": sid, "text": text})
    meta = {
        "source": str(data_file(data_root, "spider", f"{split}_gold.sql")),
        "split": split,
        "variant": variant,
        "n_lines": len(rows),
        "n_distinct": len(distinct),
        "selected_by": "reference checker (scannerless; the harness's language)",
        "n_kept": len(samples),
        "n_dropped": len(dropped),
        "dropped": dropped,
        **grammar_stats(grammar_name),
    }
    return Dataset(name=name, grammar=load_grammar(grammar_name), samples=pick(samples, n, seed), meta=meta)


# -- registration (pyproject.toml, entry-point group gcdbench.datasets) --------------------------------------
from gcdbench.datasets.registry import loader  # noqa: E402 - the registry imports this module lazily, by name


@loader(split=("dev", "dev or train (Spider's splits)"))
def spider(name, dcfg, data_root, n, seed) -> Dataset:
    return load_spider(data_root, split=dcfg["split"], variant="plain", n=n, seed=seed)


@loader(split=("dev", "dev or train (Spider's splits)"))
def spider_spop(name, dcfg, data_root, n, seed) -> Dataset:
    return load_spider(data_root, split=dcfg["split"], variant="spop", n=n, seed=seed)
