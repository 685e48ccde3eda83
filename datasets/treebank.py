"""TreeBank POS dataset: a grammar induced from Penn Treebank trees, with the trees' POS sequences as samples.

The grammar is *built on load* from ``<data_root>/treebank/combined/*.mrg`` (NLTK's 10% WSJ sample, non-commercial
data); no derived grammar text is kept in the repository.

Induction (:func:`induce_treebank_grammar`):

* the first ``n_trees`` trees (files sorted by name, trees in file order; each top-level ``( (S ...) )`` bracket is
  one tree with an unlabeled root) are read with the small S-expression reader below;
* labels are normalised by :func:`normalize_label` (function tags and indices stripped, ``NP-SBJ-1`` -> ``NP``,
  ``NP=2`` -> ``NP``; labels starting with ``-`` such as ``-NONE-``, ``-LRB-`` are kept whole);
* ``-NONE-`` elements are dropped, and so is every constituent left empty by that, recursively;
* every internal node gives one production ``label -> child labels``; preterminals (POS tags) are terminals and
  the words are discarded; the unlabeled root gives the ``start`` alternatives; unit self-loops ``X -> X`` are
  left out (they add nothing to the language);
* the Lark text has one lowercase rule per phrase label (``PRT|ADVP`` -> ``prt_advp``), one string-literal
  terminal per POS tag with its exact text (``PRP_S: "PRP$"``, ``COMMA: ","``), and ``%ignore " "``.

The result is highly ambiguous (flat, overlapping productions; not LALR(1)) on purpose. Samples are the trees'
POS-tag sequences joined by single spaces, ``tb-000`` ... in tree order.
"""
from __future__ import annotations

import functools
import re
from pathlib import Path

from gcdbench.datasets.base import Dataset, Sample, data_file, pick, read_text
from gcdbench.parsers.base import GrammarSpec

NONE_TAG = "-NONE-"

#: Lark terminal names for POS tags that are not already valid upper-case names (readable, fixed).
TAG_NAMES = {
    "PRP$": "PRP_S",
    "WP$": "WP_S",
    "$": "DOLLAR",
    "#": "HASH",
    ",": "COMMA",
    ".": "PERIOD",
    ":": "COLON",
    "``": "LQUOTE",
    "''": "RQUOTE",
    "-LRB-": "LRB",
    "-RRB-": "RRB",
    "-NONE-": "NONE",
}

_TOKEN = re.compile(r"\(|\)|[^\s()]+")
_TERMINAL_NAME = re.compile(r"[A-Z][A-Z0-9_]*")
_RULE_NAME = re.compile(r"[a-z][a-z0-9_]*")


# --------------------------------------------------------------------------------------------------
# Reading bracketed trees
# --------------------------------------------------------------------------------------------------
def read_trees(text: str, source: str = "<text>") -> list[tuple]:
    """Top-level bracketed trees of ``text``. A node is ``(label, children)``: ``label`` is ``""`` for an
    unlabeled bracket, each child is a node or a word (``str``)."""
    trees: list[tuple] = []
    stack: list[tuple] = []
    tokens = _TOKEN.findall(text)
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok == "(":
            if i + 1 < len(tokens) and tokens[i + 1] not in ("(", ")"):
                node = (tokens[i + 1], [])
                i += 1
            else:
                node = ("", [])
            if stack:
                stack[-1][1].append(node)
            stack.append(node)
        elif tok == ")":
            if not stack:
                raise ValueError(f"{source}: unbalanced ')' (token {i})")
            node = stack.pop()
            if not stack:
                trees.append(node)
        else:
            if not stack:
                raise ValueError(f"{source}: word {tok!r} outside any bracket (token {i})")
            stack[-1][1].append(tok)
        i += 1
    if stack:
        raise ValueError(f"{source}: {len(stack)} bracket(s) left open at the end")
    return trees


# --------------------------------------------------------------------------------------------------
# Normalisation
# --------------------------------------------------------------------------------------------------
def normalize_label(label: str) -> str:
    """Strip function tags and indices: ``NP-SBJ-1`` -> ``NP``, ``PP-CLR`` -> ``PP``, ``NP=2`` -> ``NP``.
    Labels starting with ``-`` (``-NONE-``, ``-LRB-``, ``-RRB-``) are returned unchanged."""
    if not label or label.startswith("-"):
        return label
    return re.split(r"[-=]", label, maxsplit=1)[0] or label


def is_preterminal(node) -> bool:
    return not isinstance(node, str) and len(node[1]) == 1 and isinstance(node[1][0], str)


def clean_tree(node):
    """A copy of ``node`` with labels normalised, ``-NONE-`` preterminals dropped and constituents left
    empty removed (recursively); ``None`` when nothing is left. Words are kept in preterminals."""
    label = normalize_label(node[0])
    if is_preterminal(node):
        return None if label == NONE_TAG else (label, [node[1][0]])
    kids = [c for c in (clean_tree(k) for k in node[1] if not isinstance(k, str)) if c is not None]
    return (label, kids) if kids else None


def pos_sequence(node) -> list[str]:
    """POS tags of a cleaned tree, left to right."""
    if is_preterminal(node):
        return [node[0]]
    return [t for k in node[1] for t in pos_sequence(k)]


def productions(node, out: set | None = None, raw: bool = False) -> set:
    """Non-lexical productions ``(lhs, ((kind, label), ...))`` of a tree, ``kind`` "T" for a preterminal child
    and "N" for a phrase. Unit self-loops are left out unless ``raw``."""
    out = set() if out is None else out
    if is_preterminal(node):
        return out
    rhs = tuple(("T" if is_preterminal(k) else "N", k[0]) for k in node[1])
    if raw or rhs != (("N", node[0]),):
        out.add((node[0], rhs))
    for k in node[1]:
        productions(k, out, raw)
    return out


def _map_labels(labels, fixed: dict, upper: bool, valid: re.Pattern, reserved=()) -> dict:
    """Deterministic, injective map of labels to Lark names."""
    out = {}
    for lab in sorted(labels):
        if lab in fixed:
            name = fixed[lab]
        else:
            name = lab.replace("$", "_S")
            name = re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_")
            name = name.upper() if upper else name.lower()
            if not valid.fullmatch(name) or name in reserved:
                name = ("T_" if upper else "x_") + name
        out[lab] = name
    names = list(out.values())
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes or not all(valid.fullmatch(n) for n in names):
        raise ValueError(f"label map not injective/valid: {dupes or names}")
    return out


# --------------------------------------------------------------------------------------------------
# Induction
# --------------------------------------------------------------------------------------------------
def read_first_trees(combined: Path, n_trees: int) -> tuple[list[tuple], list[str]]:
    """The first ``n_trees`` raw trees under ``combined`` (``*.mrg`` sorted by name) and the files used."""
    trees, used = [], []
    for path in sorted(combined.glob("*.mrg")):
        if len(trees) >= n_trees:
            break
        got = read_trees(read_text(path, "treebank file"), source=str(path))
        trees.extend(got[: n_trees - len(trees)])
        used.append(path.name)
    if len(trees) < n_trees:
        raise ValueError(f"{combined}: only {len(trees)} trees in *.mrg, {n_trees} asked for")
    return trees, used


def _strip_all(node):
    """Labels normalised, nothing dropped (for the README's 'stripped' production count)."""
    if isinstance(node, str):
        return node
    return (normalize_label(node[0]), [_strip_all(k) for k in node[1]])


@functools.lru_cache(maxsize=8)
def _induce(combined: str, n_trees: int) -> tuple[str, dict, tuple[str, ...]]:
    raw_trees, used = read_first_trees(Path(combined), n_trees)
    raw_prods: set = set()
    stripped_prods: set = set()
    prods: set = set()
    with_loops: set = set()
    samples: list[str] = []
    for i, raw in enumerate(raw_trees):
        productions(raw, raw_prods, raw=True)
        productions(_strip_all(raw), stripped_prods, raw=True)
        tree = clean_tree(raw)
        if tree is None:
            raise ValueError(f"{combined}: tree {i} is empty once -NONE- elements are dropped")
        productions(tree, prods)
        productions(tree, with_loops, raw=True)
        samples.append(" ".join(pos_sequence(tree)))
    self_loops = with_loops - prods

    root_prods = sorted(rhs for lhs, rhs in prods if lhs == "")
    phrase = {lhs for lhs, _ in prods if lhs != ""} | {lab for _, rhs in prods for k, lab in rhs if k == "N"}
    tags = {lab for _, rhs in prods for k, lab in rhs if k == "T"}
    if "" in phrase or "" in tags:
        raise ValueError(f"{combined}: an unlabeled bracket below the root")
    rule_of = _map_labels(phrase, {}, upper=False, valid=_RULE_NAME, reserved=("start",))
    term_of = _map_labels(tags, TAG_NAMES, upper=True, valid=_TERMINAL_NAME)

    def sym(s):
        return term_of[s[1]] if s[0] == "T" else rule_of[s[1]]

    by_lhs: dict[str, list[str]] = {}
    for lhs, rhs in prods:
        by_lhs.setdefault("start" if lhs == "" else rule_of[lhs], []).append(" ".join(sym(s) for s in rhs))
    lengths = [len(s.split()) for s in samples]
    stats = {
        "source": "treebank/combined/*.mrg (NLTK 10% WSJ Penn Treebank sample, non-commercial use only)",
        "files": [used[0], used[-1]],
        "n_files": len(used),
        "trees": len(raw_trees),
        "productions_raw_labels": len(raw_prods),
        "productions_stripped": len(stripped_prods),
        "productions": len(prods),
        "self_loops_removed": len(self_loops),
        "rules": len(by_lhs),
        "nonterminals": len(phrase),
        "terminals": len(tags),
        "start_alternatives": len(root_prods),
        "max_rhs_len": max(len(rhs) for _, rhs in prods),
        "sample_len_mean": round(sum(lengths) / len(lengths), 2),
        "sample_len_min": min(lengths),
        "sample_len_max": max(lengths),
        "tag_names": {t: term_of[t] for t in sorted(tags)},
        "label_names": {p: rule_of[p] for p in sorted(phrase)},
    }

    lines = [
        f"// Induced from the first {len(raw_trees)} trees of treebank/combined ({used[0]} .. {used[-1]}),",
        "// by gcdbench.datasets.treebank; generated on load, do not edit. Derived from non-commercial data.",
        f"// {stats['productions']} productions, {stats['nonterminals']} nonterminals, "
        f"{stats['terminals']} terminals (POS tags).",
        "",
    ]
    for name in ["start"] + sorted(n for n in by_lhs if n != "start"):
        alts = sorted(by_lhs[name])
        lines.append(f"{name}: {alts[0]}")
        lines.extend(f"    | {a}" for a in alts[1:])
        lines.append("")
    for tag in sorted(tags, key=lambda t: term_of[t]):
        lines.append(f'{term_of[tag]}: "{tag}"')
    lines += ["", '%ignore " "', ""]
    return "\n".join(lines), stats, tuple(samples)


def _combined_dir(data_root) -> str:
    return str(data_file(data_root, "treebank", "combined").resolve())


def induce_treebank_grammar(data_root, n_trees: int = 300) -> tuple[str, dict]:
    """Lark text of the grammar induced from the first ``n_trees`` trees, and its statistics (cached)."""
    text, stats, _ = _induce(_combined_dir(data_root), n_trees)
    return text, dict(stats)


def treebank_samples(data_root, n_trees: int = 300) -> list[Sample]:
    """The POS-sequence samples of the first ``n_trees`` trees, ids ``tb-000`` ... in order."""
    _, _, samples = _induce(_combined_dir(data_root), n_trees)
    width = max(3, len(str(n_trees - 1)))
    return [Sample(f"tb-{i:0{width}d}", s) for i, s in enumerate(samples)]


def load_treebank(data_root, n=None, seed=0) -> Dataset:
    """``dataset=treebank``: the induced POS grammar and the 300 trees' POS sequences."""
    combined = _combined_dir(data_root)
    text, stats = induce_treebank_grammar(data_root)
    grammar = GrammarSpec(name="treebank", lark=text, start="start",
                          path=f"{combined} (induced from the first {stats['trees']} trees)")
    samples = treebank_samples(data_root)
    return Dataset(name="treebank", grammar=grammar, samples=pick(samples, n, seed), meta=stats)


# -- registration (pyproject.toml, entry-point group gcdbench.datasets) --------------------------------------
from gcdbench.datasets.registry import loader  # noqa: E402 - the registry imports this module lazily, by name


@loader()
def treebank(name, dcfg, data_root, n, seed) -> Dataset:
    return load_treebank(data_root, n=n, seed=seed)
