"""Java and Go: real source files as samples of SynCode's grammars (seed 003's Java and Go tasks).

Data: ``<data_root>/code/{java,go}_src.jsonl.gz`` (one ``{"path", "text"}`` object per line, in path order; see
that folder's PROVENANCE.md). Grammars: Java is SynCode's ``java.lark`` as it is, read from
``<data_root>/code/java.lark``; Go is ``datasets/grammars/go.lark``, SynCode's ``go.lark`` with Go's statement ends
written into the grammar (below).

Samples (``kind=positive``), as the seed chooses them: the files the grammar accepts, in path order, up to ``count``
(and the run's ``samples=``), each with its leading comments and white space removed: the harness's language has
no ignored text before the first token (``parsers/reference.py``; XGrammar and LLGuidance refuse it too), and
every file here starts with a licence comment. A file is kept when its sample text is at most ``max_chars``
characters, Lark's parser of the grammar accepts it (LALR(1) when the grammar is LALR(1), else Earley) and the
reference checker (the harness's language) confirms it; a file Lark accepts and the reference refuses is a
disagreement between the two, dropped and listed in ``meta["reference_disagrees"]``. ``meta`` counts what was
dropped before the last kept file (``n_scanned``, ``n_kept``, ``n_rejected_by_grammar``, ``n_too_long``) and over
the whole data (``n_files``, ``n_accepted_all``, ``n_too_long_all``). Lark's verdicts over the whole data and the
reference's verdicts are cached on disk (``cache_dir``, default ``~/.cache/gcdbench/datasets``), keyed by the
grammar's and the data file's content hashes and ``max_chars``.

Negative samples (``kind=negative``): one seeded mutation of each selected file (delete, duplicate or swap a
token, drop a ``}``, insert a stray keyword) that leaves the language, i.e. the reference checker refuses it (a
mutation still inside is drawn again, up to :data:`MAX_DRAWS` times). Ids name the file and the mutation; a
negative passes when the engine rejects it (``meta["kind"] == "negative"``).

Go's statement ends. Go ends a statement at a line break right after an identifier, a literal, ``break``,
``continue``, ``fallthrough``, ``return``, ``++``, ``--``, ``)``, ``]`` or ``}``; any other line break is white
space. SynCode's grammar makes every line break an ``EOS`` token and relies on SynCode's parser to drop the ones it
does not expect, so plain Lark (and every engine) accepted 1 of 2,112 files. ``go.lark`` here says Go's rule in
the grammar itself: each token after which Go inserts no semicolon is a terminal that runs on over the line
breaks and comments after it, and ``EOS`` is a line break anywhere else; the files stay verbatim Go (what a model
writes), and a mask allows a newline exactly where Go's lexer would read one. The grammar's header lists every
change and the two corners where it is stricter than Go (none occurs in gofmt'd code).
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import random
import re
from pathlib import Path

from gcdbench.datasets.base import DataError, DataMissing, Dataset, Sample, json_lines, load_grammar, read_text
from gcdbench.parsers.base import GrammarSpec

LANGS = {
    # name -> (grammar: "data" = <data_root>/code/<name>.lark, else a shipped grammar; stray keywords)
    "java": ("data", ("class", "return", "else", "import", "new", "int")),
    "go": ("shipped", ("func", "package", "else", "import", "return", "var")),
}
KINDS = ("positive", "negative")
MUTATIONS = ("delete", "duplicate", "swap", "drop_brace", "stray_keyword")
#: draws of a mutation per file before the file gives no negative sample (counted in meta)
MAX_DRAWS = 50
CACHE_FORMAT = 1

#: comments and white space before the first token (both languages write // and /* */ comments)
LEADING = re.compile(r"\A(?:\s+|//[^\n]*|/\*[\s\S]*?\*/)*")
#: the tokens a mutation works on: strings, comments, words, numbers, white space, one punctuation character
TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"|`[^`]*`|\'(?:[^\'\\\n]|\\.)*\'|//[^\n]*|/\*[\s\S]*?\*/|\w+|\s+|.', re.S)


def sample_text(text: str) -> str:
    """A file's sample: its text without the comments and white space before its first token."""
    return LEADING.sub("", text, count=1)


# -- data and grammars ----------------------------------------------------------------------------------------
def code_file(data_root, name: str) -> Path:
    """``<data_root>/code/<name>``; a missing file raises :class:`DataMissing` naming it."""
    path = Path(data_root).expanduser() / "code" / name
    if not path.exists():
        raise DataMissing(f"missing data file {path} (data_root={data_root!r}): the Java and Go data is SynCode's "
                          "java.lark and real source files as {java,go}_src.jsonl.gz (one {\"path\", \"text\"} object "
                          "per line; see PROVENANCE.md in the shared data's code/ folder); point data_root=<folder> "
                          f"at a folder that has code/{name}")
    return path


def read_files(path: Path) -> list[tuple[str, str]]:
    """``(path, text)`` of every line of a ``jsonl.gz`` file, in file order; a bad line raises DataError naming it."""
    rows = [(str(r["path"]), str(r["text"])) for r in json_lines(path, ("path", "text"), "a source file record")]
    if not rows:
        raise DataError(f"{path} holds no file: nothing to sample")
    return rows


def code_grammar(lang: str, data_root) -> GrammarSpec:
    """The grammar of ``lang``: SynCode's java.lark from the data root, or the shipped go.lark."""
    where, _ = LANGS[lang]
    if where == "shipped":
        return load_grammar(lang)
    path = code_file(data_root, f"{lang}.lark")
    return GrammarSpec(name=lang, lark=read_text(path, "grammar"), path=str(path))


@functools.lru_cache(maxsize=8)
def lark_parser(lark_text: str, start: str = "start"):
    """Lark's LALR(1) parser of the grammar, or its Earley parser when the grammar is not LALR(1)."""
    import lark
    from lark.exceptions import GrammarError

    try:
        return lark.Lark(lark_text, start=start, parser="lalr")
    except GrammarError:
        return lark.Lark(lark_text, start=start, parser="earley", lexer="dynamic")


def lark_accepts(grammar: GrammarSpec, text: str) -> bool:
    from lark.exceptions import LarkError

    try:
        lark_parser(grammar.lark, grammar.start).parse(text)
    except (LarkError, RecursionError):
        return False
    return True


@functools.lru_cache(maxsize=8)
def _checker(lark_text: str, start: str):
    from gcdbench.parsers.reference import ReferenceChecker

    return ReferenceChecker(GrammarSpec(name="code", lark=lark_text, start=start))


def in_language(grammar: GrammarSpec, text: str) -> bool:
    """Whether ``text`` is a sentence of the grammar as the harness defines it (the reference checker)."""
    return _checker(grammar.lark, grammar.start).is_sentence(text.encode("utf-8"))


# -- the scan and its cache -----------------------------------------------------------------------------------
class Scan:
    """Lark's verdict on every file of a data file under one grammar and ``max_chars``, and the reference's on the
    files asked so far, kept in a JSON file under ``cache_dir``."""

    def __init__(self, grammar: GrammarSpec, data_path: Path, rows, max_chars: int, cache_dir):
        self.grammar, self.rows, self.max_chars = grammar, rows, max_chars
        data_key = hashlib.sha256(data_path.read_bytes()).hexdigest()[:16]
        from gcdbench.parsers.base import cache_dir_of

        root = cache_dir_of("datasets", cache_dir)
        self.path = root / f"{grammar.name}-{grammar.key()}-{data_key}-{max_chars}-v{CACHE_FORMAT}.json"
        self.state = self._read()
        if self.state is None:
            too_long, accepted = [], []
            for i, (_, text) in enumerate(rows):
                s = sample_text(text)
                if len(s) > max_chars:
                    too_long.append(i)
                elif lark_accepts(grammar, s):
                    accepted.append(i)
            self.state = {"format": CACHE_FORMAT, "n_files": len(rows), "too_long": too_long, "accepted": accepted,
                          "lark_parser": lark_parser(grammar.lark, grammar.start).options.parser, "reference": {}}
            self._write()
        self.cached = self.state.get("cached", False)

    def _read(self):
        try:
            state = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        ok = isinstance(state, dict) and state.get("format") == CACHE_FORMAT and state.get("n_files") == len(self.rows)
        if ok:
            state["cached"] = True
        return state if ok else None

    def _write(self) -> None:
        """Write atomically; a cache that cannot be written is skipped."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps({k: v for k, v in self.state.items() if k != "cached"}), encoding="utf-8")
            os.replace(tmp, self.path)
        except OSError:
            pass

    def reference(self, i: int) -> bool:
        """The reference checker's verdict on file ``i``'s sample (cached)."""
        got = self.state["reference"].get(str(i))
        if got is None:
            got = in_language(self.grammar, sample_text(self.rows[i][1]))
            self.state["reference"][str(i)] = got
            self._dirty = True
        return got

    def select(self, limit: int | None) -> tuple[list[int], dict]:
        """The first ``limit`` files (None: all) that Lark accepts and the reference confirms, in path order, and
        the counts of what was dropped on the way."""
        self._dirty = False
        kept, disagree = [], []
        for i in self.state["accepted"]:
            if limit is not None and len(kept) >= limit:
                break
            (kept if self.reference(i) else disagree).append(i)
        if self._dirty:
            self._write()
        last = kept[-1] if kept else len(self.rows) - 1
        too_long = set(self.state["too_long"])
        n_scanned = (last + 1) if limit is not None and len(kept) >= limit else len(self.rows)
        n_too_long = sum(1 for i in too_long if i < n_scanned)
        counts = {
            "n_scanned": n_scanned,
            "n_kept": len(kept),
            "n_too_long": n_too_long,
            "n_rejected_by_grammar": n_scanned - len(kept) - len(disagree) - n_too_long,
            "n_reference_disagree": len(disagree),
            "reference_disagrees": [self.rows[i][0] for i in disagree],
            "n_files": len(self.rows),
            "n_accepted_all": len(self.state["accepted"]),
            "n_too_long_all": len(too_long),
        }
        return kept, counts


# -- negative samples -----------------------------------------------------------------------------------------
def mutate(text: str, rng: random.Random, keywords) -> tuple[str, str, int] | None:
    """One random mutation of ``text``: ``(mutated, kind, character offset)``, or None when the draw leaves the
    text as it is (no ``}`` to drop, two equal tokens to swap)."""
    toks = [(m.start(), m.group()) for m in TOKEN.finditer(text)]
    code = [k for k, (_, t) in enumerate(toks) if not t.isspace() and not t.startswith(("//", "/*"))]
    if len(code) < 2:
        return None
    kind = rng.choice(MUTATIONS)
    if kind == "drop_brace":
        braces = [k for k in code if toks[k][1] == "}"]
        if not braces:
            return None
        k = rng.choice(braces)
        return text[:toks[k][0]] + text[toks[k][0] + 1:], kind, toks[k][0]
    j = rng.randrange(len(code) - 1) if kind == "swap" else rng.randrange(len(code))
    k = code[j]
    at, tok = toks[k]
    end = at + len(tok)
    if kind == "delete":
        return text[:at] + text[end:], kind, at
    if kind == "duplicate":
        return text[:end] + " " + tok + text[end:], kind, at
    if kind == "swap":
        k2 = code[j + 1]
        at2, tok2 = toks[k2]
        if tok2 == tok:
            return None
        return text[:at] + tok2 + text[end:at2] + tok + text[at2 + len(tok2):], kind, at
    word = rng.choice(keywords)
    return text[:at] + word + " " + text[at:], kind, at


def negatives(lang: str, grammar: GrammarSpec, rows, kept: list[int], seed: int) -> tuple[list[Sample], dict]:
    """One mutation outside the language per kept file (seeded per file), and what happened."""
    _, keywords = LANGS[lang]
    samples, info, none_found, lark_accepts_neg = [], {}, [], 0
    for i in kept:
        path, text = rows[i]
        base = sample_text(text)
        rng = random.Random(f"{lang}:{seed}:{path}")
        for _ in range(MAX_DRAWS):
            got = mutate(base, rng, keywords)
            if got is None or in_language(grammar, got[0]):
                continue
            mutated, kind, at = got
            sid = f"{lang}-{i:05d}-{kind}-{at}"
            samples.append(Sample(sid, mutated))
            info[sid] = {"file": path, "mutation": kind, "offset": at}
            lark_accepts_neg += lark_accepts(grammar, mutated)
            break
        else:
            none_found.append(path)
    return samples, {"mutations": info, "n_without_negative": len(none_found), "without_negative": none_found,
                     "n_lark_accepts_negative": lark_accepts_neg}


# -- the loader -----------------------------------------------------------------------------------------------
def load_code(lang: str, data_root, count: int | None = None, max_chars: int = 6000, kind: str = "positive",
              seed: int = 0, cache_dir=None, n: int | None = None) -> Dataset:
    """The ``lang`` dataset (``java`` or ``go``): the first ``min(count, n)`` accepted files (None: no limit) as
    positive samples, or one mutation outside the language of each as negative samples."""
    if lang not in LANGS:
        raise ValueError(f"unknown code dataset {lang!r}; valid: {list(LANGS)}")
    if kind not in KINDS:
        raise DataError(f"dataset {lang}: kind={kind!r}; valid: {list(KINDS)}")
    for opt, v in (("count", count), ("max_chars", max_chars)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise DataError(f"dataset {lang}: {opt}={v!r} must be a whole number >= 1"
                            + (" (or null for every accepted file)" if opt == "count" else ""))
    limits = [x for x in (count, n) if x is not None]
    limit = min(limits) if limits else None
    data_path = code_file(data_root, f"{lang}_src.jsonl.gz")
    grammar = code_grammar(lang, data_root)
    rows = read_files(data_path)
    scan = Scan(grammar, data_path, rows, max_chars, cache_dir)
    kept, counts = scan.select(limit)
    meta = {
        "source": str(data_path),
        "grammar_source": grammar.path,
        "kind": kind,
        "count": count,
        "max_chars": max_chars,
        "selected_by": "Lark's parser, confirmed by the reference checker (the harness's language); in path order",
        "lark_parser": scan.state["lark_parser"],
        "scan_cached": scan.cached,
        "sample_text": "the file without its leading comments and white space",
        "files": {f"{lang}-{i:05d}": rows[i][0] for i in kept},
        **counts,
    }
    if kind == "positive":
        samples = [Sample(f"{lang}-{i:05d}", sample_text(rows[i][1])) for i in kept]
    else:
        samples, neg = negatives(lang, grammar, rows, kept, seed)
        meta.update(seed=seed, **neg)
    return Dataset(name=lang if kind == "positive" else f"{lang}_negative", grammar=grammar, samples=samples,
                   meta=meta)


# -- registration (pyproject.toml, entry-point group gcdbench.datasets) --------------------------------------
from gcdbench.datasets.registry import loader  # noqa: E402 - the registry imports this module lazily, by name

OPTIONS = dict(
    count=(None, "samples: the first N files the grammar accepts, in path order (null: as many as the run's "
                 "samples=, which caps it too)"),
    max_chars=(6000, "skip files whose sample text is longer (counted in meta n_too_long)"),
    kind=("positive", "positive (accepted files) or negative (a seeded mutation of each, outside the language)"),
    seed=(0, "seed of the negative samples' mutations"),
    cache_dir=(None, "where the scan's verdicts are cached (default $GCDBENCH_CACHE/datasets, ~/.cache/gcdbench)"),
)


def _load(name, dcfg, data_root, n, seed) -> Dataset:
    return load_code(name, data_root, count=dcfg["count"], max_chars=dcfg["max_chars"], kind=dcfg["kind"],
                     seed=dcfg["seed"], cache_dir=dcfg["cache_dir"], n=n)


java = loader(**OPTIONS)(_load)
go = loader(**OPTIONS)(_load)
