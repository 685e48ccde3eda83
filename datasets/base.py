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
    """The text of a UTF-8 file. A file that is not UTF-8 raises :class:`DataError` naming the file and the byte
    offset of the first bad byte (the codec's own message names neither); a directory, a device or a file over
    :data:`MAX_INPUT_MB` is refused the same way, read no further than the limit; a leading byte order mark is
    dropped, with a note (it is not text of the grammar or of the first sample)."""
    import os
    import stat
    import sys

    path = Path(path)
    if path.is_dir():
        raise DataError(f"{what} {path} is a directory: give the path of a file")
    if path.exists() and not stat.S_ISREG(path.stat().st_mode):
        raise DataError(f"{what} {path} is not a regular file (a device or a pipe): give the path of a file")
    limit_mb = float(os.environ.get("GCDBENCH_MAX_INPUT_MB", MAX_INPUT_MB))
    limit = int(limit_mb * 2**20)
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise DataError(f"{what} {path} is larger than {limit_mb:g} MB: split it, or raise the limit with "
                        "GCDBENCH_MAX_INPUT_MB=<MB>")
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
class Dataset:
    name: str
    grammar: GrammarSpec
    samples: list[Sample]
    meta: dict = field(default_factory=dict)   # counts, provenance, grammar statistics


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
