"""What a dataset is for the harness: a grammar plus the strings (samples) that the runner teacher-forces."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gcdbench.parsers.base import GrammarSpec

GRAMMAR_DIR = Path(__file__).parent / "grammars"

# Where a user gets each downloadable file (printed when one is missing).
DOWNLOADS = {
    "spider": "Spider 1.0 from https://yale-lily.github.io/spider (dev_gold.sql, train_gold.sql, tables.json, "
              "dev.json; gold files are 'SQL<TAB>db_id' per line) into <data_root>/spider/",
    "treebank": "the NLTK 10% Penn Treebank sample: python -m nltk.downloader treebank, or "
                "https://raw.githubusercontent.com/nltk/nltk_data/gh-pages/packages/corpora/treebank.zip; "
                "unzip its treebank/combined/*.mrg into <data_root>/treebank/combined/",
}


class DataMissing(FileNotFoundError):
    """A data file is not under the data root; the message names the file and where to get it."""


class DataError(ValueError):
    """A data file that cannot be used as it is (not UTF-8, no samples, unknown dataset option)."""


#: the largest input file read (grammar, samples, data), in MB; ``GCDBENCH_MAX_INPUT_MB`` raises it
MAX_INPUT_MB = 256


def read_text(path: str | Path, what: str = "file") -> str:
    """The text of a UTF-8 file, or of a gzip file (a name ending ``.gz``: corpora ship so) decompressed. A file
    that is not UTF-8 raises :class:`DataError` naming the file and the byte offset of the first bad byte (the
    codec's own message names neither); a directory, a device, a damaged gzip file or a file over
    :data:`MAX_INPUT_MB` (decompressed) is refused the same way, read no further than the limit; a leading byte
    order mark is dropped, with a note (it is not text of the grammar or of the first sample)."""
    import gzip
    import os
    import stat
    import sys
    import zlib

    path = Path(path)
    if path.is_dir():
        raise DataError(f"{what} {path} is a directory: give the path of a file")
    if path.exists() and not stat.S_ISREG(path.stat().st_mode):
        raise DataError(f"{what} {path} is not a regular file (a device or a pipe): give the path of a file")
    limit_mb = float(os.environ.get("GCDBENCH_MAX_INPUT_MB", MAX_INPUT_MB))
    limit = int(limit_mb * 2**20)
    packed = path.name.endswith(".gz")
    try:
        with (gzip.open if packed else open)(path, "rb") as f:
            data = f.read(limit + 1)
    except (gzip.BadGzipFile, EOFError, zlib.error) as err:
        raise DataError(f"{what} {path} is not a whole gzip file ({err}): give it again, or the file without "
                        "the .gz ending") from None
    if len(data) > limit:
        raise DataError(f"{what} {path} is larger than {limit_mb:g} MB{' decompressed' if packed else ''}: split "
                        "it, or raise the limit with GCDBENCH_MAX_INPUT_MB=<MB>")
    if data.startswith(b"\xef\xbb\xbf"):
        print(f"note: {what} {path} starts with a UTF-8 byte order mark; it is ignored", file=sys.stderr)
        data = data[3:]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        bad = data[err.start: err.start + 4]
        line = data.count(b"\n", 0, err.start) + 1
        raise DataError(f"{what} {path} is not UTF-8: byte offset {err.start} (line {line}) holds {bad!r} "
                        f"({err.reason}); re-save the file as UTF-8") from None


def json_lines(path: str | Path, keys: tuple[str, ...], what: str) -> list[dict]:
    """The JSON objects of a gzipped JSON-lines file, in file order (blank lines skipped). A line that is not a
    JSON object with ``keys``, or a file that is not gzip of UTF-8, raises :class:`DataError` naming the file, the
    line and ``what`` a line should be."""
    import gzip
    import json

    rows = []
    try:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError as err:
                    raise DataError(f"{path} line {lineno} is not JSON ({err}); re-create the file") from None
                if not isinstance(row, dict) or any(k not in row for k in keys):
                    raise DataError(f"{path} line {lineno} has no {', '.join(map(repr, keys))}: not {what}; "
                                    "re-create the file")
                rows.append(row)
    except (OSError, EOFError, UnicodeDecodeError) as err:
        raise DataError(f"{path}: not a readable gzip file of UTF-8 JSON lines ({err})") from None
    return rows


@dataclass(frozen=True)
class Sample:
    id: str
    text: str
    #: a fixed token sequence (sampled decoding, ``datasets/sampled.py``) instead of the tokenizer's encoding of
    #: ``text``, and the tokenizer it belongs to
    token_ids: tuple[int, ...] | None = None
    tokenizer: str | None = None

    def ids(self, tokenizer) -> list[int]:
        """The token ids the runner teacher-forces: the stored sequence if there is one, else ``encode(text)``."""
        if self.token_ids is None:
            return tokenizer.encode(self.text)
        if self.tokenizer != tokenizer.name:
            raise ValueError(f"sample {self.id!r} is a token sequence of tokenizer {self.tokenizer!r}, not "
                             f"{tokenizer.name!r}: run it with tokenizer={self.tokenizer}, or generate sequences "
                             f"for {tokenizer.name} (python -m gcdbench.datasets.sampled --help)")
        return list(self.token_ids)


@dataclass
class GrammarGroup:
    """One grammar of a dataset that has many (MaskBench: one per JSON Schema) and the samples written in it."""

    id: str
    grammar: GrammarSpec
    samples: list[Sample]


@dataclass
class Dataset:
    name: str
    grammar: GrammarSpec
    samples: list[Sample]
    meta: dict = field(default_factory=dict)   # counts, provenance, grammar statistics
    #: a dataset of many grammars: each group's samples are teacher-forced under that group's grammar (the
    #: runner compiles each in turn in one worker); ``samples`` is then every group's samples in group order and
    #: ``grammar`` only names the set (see :func:`grouped`). None: one grammar for every sample
    groups: list[GrammarGroup] | None = None

    def grammar_key(self) -> str:
        """What the cell's identity keys the grammar by: its content hash, or the hash of every group's."""
        if not self.groups:
            return self.grammar.key()
        import hashlib

        return hashlib.sha256("\n".join(f"{g.id} {g.grammar.key()}" for g in self.groups).encode()).hexdigest()[:16]

    def group_of(self) -> dict[str, GrammarGroup]:
        """Sample id -> its group ({} for a one-grammar dataset)."""
        return {s.id: g for g in self.groups or () for s in g.samples}


def grouped(name: str, groups: list[GrammarGroup], meta: dict | None = None) -> Dataset:
    """A dataset of many grammars. Sample ids must be unique across groups. Its ``grammar`` is a stand-in that
    names the set and refuses to compile (a tool that takes one grammar says so instead of using one of them)."""
    samples = [s for g in groups for s in g.samples]
    ids = [s.id for s in samples]
    bad = [i for i in ids if "/" in i or "\\" in i or i.startswith(".")]
    if bad:
        raise DataError(f"dataset {name!r}: sample id {bad[0]!r} cannot name a file (a cell keeps one file per "
                        "sample): no '/' or '\\', no leading '.'; join the group id and the sample number with '#'")
    if len(set(ids)) != len(ids):
        raise DataError(f"dataset {name!r}: sample ids repeat across its grammars; give each group's samples ids "
                        "that start with the group id")
    stand_in = GrammarSpec(name=f"{name} ({len(groups)} grammars)", lark="",
                           refusal=f"dataset {name} has {len(groups)} grammars, one per group of samples: run it "
                                   "with experiments.run, which compiles each group's grammar in turn")
    return Dataset(name=name, grammar=stand_in, samples=samples, meta=dict(meta or {}), groups=list(groups))


def data_file(data_root: str | Path, source: str, relpath: str) -> Path:
    """Path of ``<data_root>/<source>/<relpath>``; raises :class:`DataMissing` with a download hint."""
    path = Path(data_root).expanduser() / source / relpath
    if not path.exists():
        raise DataMissing(
            f"missing data file {path} (data_root={data_root!r}). Get {DOWNLOADS[source]}, "
            f"or point data_root=<folder> at a folder that has {source}/{relpath}."
        )
    return path


def load_grammar(name: str, start: str = "start") -> GrammarSpec:
    """A grammar shipped with the project, ``datasets/grammars/<name>.lark``."""
    path = GRAMMAR_DIR / f"{name}.lark"
    if not path.exists():
        valid = sorted(p.stem for p in GRAMMAR_DIR.glob("*.lark"))
        raise FileNotFoundError(f"no grammar {name!r} in {GRAMMAR_DIR}; valid: {valid}")
    return GrammarSpec(name=name, lark=read_text(path, "grammar"), start=start, path=str(path))


def pick(samples: list[Sample], n: int | None, seed: int) -> list[Sample]:
    """``n`` samples (None: all): the first ``n`` in file order when seed < 0, else a seeded random choice kept in
    order."""
    if n is not None and n < 1:
        raise ValueError(f"n={n}: at least 1 sample (None for all)")
    if n is None or n >= len(samples):
        return list(samples)
    if seed < 0:
        return samples[:n]
    import random

    idx = sorted(random.Random(seed).sample(range(len(samples)), n))
    return [samples[i] for i in idx]
