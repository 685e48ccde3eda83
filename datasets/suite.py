"""The grammar suite beyond Table 1: JSON, Lark's own grammar language, and ambiguity stress grammars.

Each loader returns a :class:`Dataset` whose grammar is a ``.lark`` file written for this project
(``datasets/grammars/``). Real samples are *extracted at load time* from files that installed packages ship
(nothing is copied into the repository; ``datasets/PROVENANCE.md`` lists the files and their licences):

* ``json``: JSON documents from :data:`JSON_SOURCES`. A document longer than ``max_tokens`` Qwen3 tokens is
  split into its largest sub-objects and sub-arrays that fit (each one a real JSON text: its exact span in the
  file, original layout kept); pieces under ``min_tokens`` are dropped.
* ``lark``: ``.lark`` files from :data:`LARK_SOURCES` plus the project's own grammars, cut at statement
  boundaries into chunks of whole statements (exact spans, comments and blank lines inside kept) of at most
  ``max_tokens`` Qwen3 tokens. A chunk starts at a statement (comment lines before it close the chunk before).
* ``ambiguous_<family>``: generated sentences of growing length (10 to 200 terminals, each terminal one Qwen3
  token) for the grammars of :data:`AMBIGUOUS`.

Every sample is checked with the reference checker at load time (one that is not a sentence is listed in
``meta`` and dropped; the tests check that none is).
"""
from __future__ import annotations

import functools
import random
import re
from importlib import metadata
from pathlib import Path

from gcdbench.datasets.base import GRAMMAR_DIR, Dataset, Sample, load_grammar, pick

#: (distribution, path inside it, licence) of every JSON file the ``json`` dataset reads, in this order.
JSON_SOURCES: tuple[tuple[str, str, str], ...] = (
    ("jsonschema-specifications", "jsonschema_specifications/schemas/draft202012/metaschema.json", "MIT"),
    ("jsonschema-specifications", "jsonschema_specifications/schemas/draft7/metaschema.json", "MIT"),
    ("jsonschema-specifications", "jsonschema_specifications/schemas/draft4/metaschema.json", "MIT"),
    ("jsonschema-specifications", "jsonschema_specifications/schemas/draft3/metaschema.json", "MIT"),
    ("jsonschema", "jsonschema/benchmarks/issue232/issue.json", "MIT"),
    ("nbformat", "nbformat/v4/nbformat.v4.schema.json", "BSD-3-Clause"),
    ("nbformat", "nbformat/v3/nbformat.v3.schema.json", "BSD-3-Clause"),
    ("torch", "torch/_dynamo/graph_break_registry.json", "BSD-3-Clause"),
    ("ipython", "IPython/utils/themes/pride.json", "BSD-3-Clause"),
)

#: (distribution, path inside it, licence) of the third-party ``.lark`` files the ``lark`` dataset reads.
LARK_SOURCES: tuple[tuple[str, str, str], ...] = (
    ("lark", "lark/grammars/lark.lark", "MIT"),
    ("lark", "lark/grammars/common.lark", "MIT"),
    ("lark", "lark/grammars/python.lark", "MIT"),
    ("lark", "lark/grammars/unicode.lark", "MIT"),
    ("sympy", "sympy/parsing/latex/lark/grammar/latex.lark", "BSD-3-Clause"),
    ("sympy", "sympy/parsing/latex/lark/grammar/greek_symbols.lark", "BSD-3-Clause"),
)

#: ambiguity families: dataset name -> (grammar file stem, sentence generator name, what it stresses)
AMBIGUOUS = {
    "ambiguous_binary": ("ambiguous_binary", "letters_a", "binary trees over one letter (Catalan many parses)"),
    "ambiguous_ternary": ("ambiguous_ternary", "letters_b", "two- and three-way splits of every span"),
    "ambiguous_expr": ("ambiguous_expr", "expression", "arithmetic without precedence or associativity"),
    "ambiguous_concat": ("ambiguous_concat", "letters_ab",
                         "Sigma+ by concatenation: Omega(t^2) work per token for parse-preserving engines "
                         "(arXiv 2603.05540)"),
    "ambiguous_right": ("ambiguous_right", "letters_ab", "Sigma+ by right recursion: the same language, unambiguous"),
}
SUITE = ("json", "lark", *AMBIGUOUS)

#: sentence lengths (terminals) of the ambiguity datasets: 30 values, roughly geometric from 10 to 200
AMBIGUOUS_LENGTHS = tuple(sorted({round(10 * 20 ** (i / 29)) for i in range(30)} | {200}))


class MissingPackage(FileNotFoundError):
    """A package that ships sample files is not installed; the message names it and the install command."""


# --------------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def _qwen3():
    from gcdbench.parsers.tokenizers import load_tokenizer

    return load_tokenizer("qwen3")


def qwen3_len(text: str) -> int:
    """Number of Qwen3 tokens of ``text`` (how documents are sized, whatever tokenizer a run uses)."""
    return len(_qwen3().encode(text))


def package_file(dist: str, relpath: str) -> Path:
    """The installed file ``relpath`` of distribution ``dist``; :class:`MissingPackage` when absent."""
    try:
        d = metadata.distribution(dist)
    except metadata.PackageNotFoundError:
        raise MissingPackage(f"package {dist!r} is not installed; it ships {relpath}, a sample file of the grammar "
                             f"suite. Install it (pip install {dist}, or pip install -e '.[test]').") from None
    path = Path(d.locate_file(relpath))
    if not path.exists():
        raise MissingPackage(f"{dist} {d.version} has no file {relpath} (a sample file of the grammar suite); "
                             f"install the version named in datasets/PROVENANCE.md")
    return path


def _source_meta(sources) -> list[dict]:
    return [{"package": dist, "version": metadata.version(dist), "file": rel, "license": lic}
            for dist, rel, lic in sources]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_")


@functools.lru_cache(maxsize=None)
def lark_parser(grammar_name: str, parser: str = "lalr", positions: bool = False):
    """Lark's own parser of a shipped grammar (LALR by default), built once per process."""
    import lark

    spec = load_grammar(grammar_name)
    return lark.Lark(spec.lark, start=spec.start, parser=parser, propagate_positions=positions)


@functools.lru_cache(maxsize=None)
def _reference(grammar_name: str):
    from gcdbench.parsers.reference import ReferenceChecker

    return ReferenceChecker(load_grammar(grammar_name))


def in_language(grammar_name: str, text: str) -> bool:
    """Whether ``text`` is a sentence of a shipped grammar (the reference checker: the harness's language)."""
    return _reference(grammar_name).is_sentence(text.encode("utf-8"))


# --------------------------------------------------------------------------------------------------
# JSON
# --------------------------------------------------------------------------------------------------
def json_pieces(text: str, max_tokens: int, min_tokens: int) -> list[tuple[str, str]]:
    """``(path, piece)`` for the largest objects/arrays of the JSON ``text`` with at most ``max_tokens`` Qwen3
    tokens, top down (the whole text when it fits); each piece is the exact source span. ``path`` is a JSON
    pointer (``/definitions/schemaArray``)."""
    tree = lark_parser("json", "lalr", True).parse(text)
    out: list[tuple[str, str]] = []

    def visit(node, path):
        span = text[node.meta.start_pos: node.meta.end_pos]
        n = qwen3_len(span)
        if n <= max_tokens:
            if n >= min_tokens:
                out.append((path or "/", span))
            return
        if node.data == "object":
            for member in node.children:
                if member is None:
                    continue
                key, value = member.children[0], member.children[-1]
                visit_value(value, f"{path}/{key[1:-1].replace('~', '~0').replace('/', '~1')}")
        elif node.data == "array":
            for i, value in enumerate(c for c in node.children if c is not None):
                visit_value(value, f"{path}/{i}")

    def visit_value(value, path):
        if hasattr(value, "data") and value.data in ("object", "array"):
            visit(value, path)

    visit_value(tree.children[0], "")
    return out


def _spread(items: list, k: int) -> list:
    """``k`` items evenly spaced over ``items`` (all of them when there are at most ``k``)."""
    if k <= 0 or len(items) <= k:
        return list(items)
    return [items[(i * len(items)) // k] for i in range(k)]


def load_json(n=None, seed=0, max_tokens: int = 300, min_tokens: int = 20, per_file: int = 12) -> Dataset:
    """``dataset=json``: JSON documents shipped in installed packages (:data:`JSON_SOURCES`), split into pieces
    of ``min_tokens``..``max_tokens`` Qwen3 tokens; at most ``per_file`` pieces per file (evenly spaced), so
    that no single file dominates. Ids ``<file>-<index of the piece in that file>``."""
    samples, dropped, per_source = [], [], []
    for dist, rel, _lic in JSON_SOURCES:
        path = package_file(dist, rel)
        text = path.read_text(encoding="utf-8")
        pieces = json_pieces(text, max_tokens, min_tokens)
        stem = _slug(f"{Path(rel).parent.name}_{Path(rel).stem}")
        kept = _spread(list(enumerate(pieces)), per_file)
        per_source.append({"file": rel, "pieces": len(pieces), "kept": len(kept)})
        for i, (pointer, piece) in kept:
            sid = f"{stem}-{i:03d}"
            if in_language("json", piece):
                samples.append(Sample(sid, piece))
            else:
                dropped.append({"id": sid, "pointer": pointer})
    meta = {"sources": _source_meta(JSON_SOURCES), "per_source": per_source, "max_tokens": max_tokens,
            "min_tokens": min_tokens, "per_file": per_file, "n_pieces": len(samples), "dropped": dropped,
            **_length_stats(samples)}
    return Dataset(name="json", grammar=load_grammar("json"), samples=pick(samples, n, seed), meta=meta)


# --------------------------------------------------------------------------------------------------
# Lark's grammar language
# --------------------------------------------------------------------------------------------------
_COMMENT_OR_BLANK = re.compile(r"\s*((//|#).*)?")


def lark_statements(text: str) -> list[tuple[int, int]]:
    """Line spans ``[first, last]`` (0-based, inclusive) of the statements of a ``.lark`` file: a statement starts
    at a line that is not blank, not only a comment, and does not start with ``|`` (an alternative going on);
    its last line is the last such continuation before the next statement."""
    lines = text.splitlines()
    spans: list[list[int]] = []
    for i, line in enumerate(lines):
        if _COMMENT_OR_BLANK.fullmatch(line):
            continue
        if line.lstrip().startswith("|") and spans:
            spans[-1][1] = i
        else:
            spans.append([i, i])
    return [(a, b) for a, b in spans]


def lark_chunks(text: str, max_tokens: int) -> list[str]:
    """Consecutive whole statements of a ``.lark`` file, as exact spans of its lines, each of at most
    ``max_tokens`` Qwen3 tokens (a single longer statement is a chunk of its own)."""
    lines = text.splitlines(keepends=True)
    chunks, cur = [], None

    def span(a, b):
        return "".join(lines[a: b + 1]).rstrip("\r\n")

    for a, b in lark_statements(text):
        if cur is not None and qwen3_len(span(cur[0], b)) <= max_tokens:
            cur[1] = b
            continue
        if cur is not None:
            chunks.append(span(*cur))
        cur = [a, b]
    if cur is not None:
        chunks.append(span(*cur))
    return chunks


def _project_grammars() -> list[Path]:
    return sorted(GRAMMAR_DIR.glob("*.lark"))


def load_lark(n=None, seed=0, max_tokens: int = 300) -> Dataset:
    """``dataset=lark``: real ``.lark`` files (:data:`LARK_SOURCES` and the project's ``datasets/grammars``) cut
    into chunks of whole statements of at most ``max_tokens`` Qwen3 tokens. Ids ``<file>-<chunk index>``."""
    files = [(package_file(dist, rel), f"{dist}:{rel}") for dist, rel, _ in LARK_SOURCES]
    files += [(p, f"gcdbench:datasets/grammars/{p.name}") for p in _project_grammars()]
    samples, dropped, per_file = [], [], []
    for path, label in files:
        chunks = lark_chunks(path.read_text(encoding="utf-8"), max_tokens)
        prefix = ("lark_" if label.startswith("lark:") else "sympy_" if label.startswith("sympy:") else "") + \
            _slug(path.stem)
        per_file.append({"file": label, "chunks": len(chunks)})
        for i, chunk in enumerate(chunks):
            sid = f"{prefix}-{i:02d}"
            if in_language("lark_lang", chunk):
                samples.append(Sample(sid, chunk))
            else:
                dropped.append({"id": sid, "text": chunk[:200]})
    meta = {"sources": _source_meta(LARK_SOURCES) + [{"package": "gcdbench", "file": f"datasets/grammars/{p.name}",
                                                     "license": "MIT (this project)"} for p in _project_grammars()],
            "per_file": per_file, "max_tokens": max_tokens, "n_chunks": len(samples), "dropped": dropped,
            **_length_stats(samples)}
    return Dataset(name="lark", grammar=load_grammar("lark_lang"), samples=pick(samples, n, seed), meta=meta)


# --------------------------------------------------------------------------------------------------
# Ambiguity stress
# --------------------------------------------------------------------------------------------------
def _letters(alphabet: str):
    def gen(length: int, rng: random.Random) -> str:
        return " ".join(rng.choice(alphabet) for _ in range(length))
    return gen


def _expression(length: int, rng: random.Random) -> str:
    """An expression of exactly ``length`` terminals (``length`` >= 1): variables, the four operators and
    parenthesised groups, terminals separated by single spaces."""
    def expr(k):   # k terminals, k odd or a parenthesised group (k >= 3)
        if k == 1:
            return [rng.choice("abcdefghijklmnopqrstuvwxyz")]
        if k >= 5 and rng.random() < 0.15:
            return ["(", *expr(k - 2), ")"]
        left = rng.randrange(1, k - 1, 2)          # odd sizes on both sides of the operator
        return [*expr(left), rng.choice("+-*/"), *expr(k - 1 - left)]

    k = length if length % 2 else length - 1      # an expression has an odd number of terminals
    return " ".join(expr(max(1, k)))


GENERATORS = {"letters_a": _letters("a"), "letters_b": _letters("b"), "letters_ab": _letters("ab"),
              "expression": _expression}


def ambiguous_sentence(family: str, length: int, seed: int = 0) -> str:
    """The sentence of ``family`` with (about) ``length`` terminals; the same for the same arguments."""
    _, gen, _ = AMBIGUOUS[family]
    return GENERATORS[gen](length, random.Random(f"{gen}:{length}:{seed}"))


def load_ambiguous(family: str, n=None, seed=0, lengths=AMBIGUOUS_LENGTHS) -> Dataset:
    """``dataset=ambiguous_<family>``: one sentence per length in ``lengths`` (10 to 200 terminals; with Qwen3
    every terminal is one token), ids ``n<length>``. The sentences are fixed (seeded by generator and length: ambiguous_concat and ambiguous_right share theirs)."""
    if family not in AMBIGUOUS:
        raise ValueError(f"unknown ambiguity family {family!r}; valid: {list(AMBIGUOUS)}")
    grammar_name, _, what = AMBIGUOUS[family]
    lengths = sorted({int(x) for x in lengths})
    if not lengths or lengths[0] < 1:
        raise ValueError(f"dataset {family}: lengths must be positive integers, got {lengths}")
    samples = []
    for length in lengths:
        text = ambiguous_sentence(family, length)
        samples.append(Sample(f"n{len(text.split()):03d}", text))
    samples = list({s.id: s for s in samples}.values())   # the expression family rounds even lengths down
    meta = {"family": family, "stresses": what, "lengths": [len(s.text.split()) for s in samples],
            "source": "generated by gcdbench.datasets.suite.ambiguous_sentence (seeded by family and length)"}
    return Dataset(name=family, grammar=load_grammar(grammar_name), samples=pick(samples, n, seed), meta=meta)


def _length_stats(samples: list[Sample]) -> dict:
    if not samples:
        return {}
    lengths = [qwen3_len(s.text) for s in samples]
    return {"qwen3_tokens_mean": round(sum(lengths) / len(lengths), 1), "qwen3_tokens_min": min(lengths),
            "qwen3_tokens_max": max(lengths)}


def load_suite_dataset(name: str, dcfg, n=None, seed=0) -> Dataset:
    """The registry's entry point for every suite dataset (``dcfg``: its ``conf/dataset/<name>.yaml`` node)."""
    if name == "json":
        return load_json(n, seed, max_tokens=int(dcfg["max_tokens"]), min_tokens=int(dcfg["min_tokens"]),
                         per_file=int(dcfg["per_file"]))
    if name == "lark":
        return load_lark(n, seed, max_tokens=int(dcfg["max_tokens"]))
    if name in AMBIGUOUS:
        lengths = dcfg["lengths"]
        return load_ambiguous(name, n, seed, tuple(lengths) if lengths else AMBIGUOUS_LENGTHS)
    raise ValueError(f"unknown suite dataset {name!r}; valid: {list(SUITE)}")


# -- registration (pyproject.toml, entry-point group gcdbench.datasets) --------------------------------------
from gcdbench.datasets.registry import loader  # noqa: E402 - the registry imports this module lazily, by name


@loader(max_tokens=(300, "documents are cut to at most this many Qwen3 tokens (whatever tokenizer the run uses)"),
        min_tokens=(20, "smaller pieces are dropped"),
        per_file=(12, "at most this many pieces of one file (evenly spaced), so that no file dominates"))
def json_documents(name, dcfg, data_root, n, seed) -> Dataset:
    return load_suite_dataset(name, dcfg, n=n, seed=seed)


@loader(max_tokens=(300, "grammar files are cut to at most this many Qwen3 tokens (whatever tokenizer the run uses)"))
def lark_grammars(name, dcfg, data_root, n, seed) -> Dataset:
    return load_suite_dataset(name, dcfg, n=n, seed=seed)


def _ambiguous(name, dcfg, data_root, n, seed) -> Dataset:
    return load_suite_dataset(name, dcfg, n=n, seed=seed)


_LENGTHS = (None, "sentence lengths in terminals (one Qwen3 token each); null: 30 lengths from 10 to 200")
# highly ambiguous by construction (Table 1 reads it for the complexity column), except the right-nested family
ambiguous_binary = loader(ambiguous=True, lengths=_LENGTHS)(_ambiguous)
ambiguous_ternary = loader(ambiguous=True, lengths=_LENGTHS)(_ambiguous)
ambiguous_expr = loader(ambiguous=True, lengths=_LENGTHS)(_ambiguous)
ambiguous_concat = loader(ambiguous=True, lengths=_LENGTHS)(_ambiguous)
ambiguous_right = loader(lengths=_LENGTHS)(_ambiguous)
