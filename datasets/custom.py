"""``dataset=custom``: any ``.lark`` grammar with the user's own samples, in the shapes people keep them.

``dataset.samples`` names the samples and ``dataset.format`` how to read them:

- ``lines``: a text file, one sample per line (blank lines skipped); ids ``<file stem>-0000``, ``-0001``, ...
- ``jsonl``: JSON Lines, one object per line with the sample's ``text`` (any characters, newlines included) and an
  optional ``id`` (a string or a number; default ``<file stem>-0000``, ... by line order); blank lines skipped.
- ``files``: a folder, one sample per file: the files under it that ``dataset.glob`` matches (``*.toml``;
  ``**/*.toml`` takes subfolders too; default ``**/*``, every file, subfolders included), sorted by path, files
  and folders whose name starts with ``.`` left out; a sample is the file's text as it is, its final newline
  included; its id is the file's path relative to the folder.
- ``auto`` (default): ``files`` for a folder, ``jsonl`` for a ``.jsonl`` file, else ``lines``.

A samples file (or grammar) whose name ends ``.gz`` is read decompressed, and named without that ending:
``docs.jsonl.gz`` is JSON Lines with ids ``docs-0000``, ...

A cell keeps one file per sample, named by the sample id, so an id's ``%``, ``/`` and ``\\`` and a leading ``.``
are written ``%25``, ``%2F``, ``%5C`` and ``%2E`` (``sub/a.toml`` is the sample ``sub%2Fa.toml``). Samples that
cannot be used (not UTF-8, a NUL byte, an empty file, a JSON line without ``text``, a glob that matches nothing, a
format that does not fit the path, ids that repeat) raise :class:`DataError`: one line naming the file and the fix.
"""
from __future__ import annotations

import json
from pathlib import Path

from gcdbench.datasets.base import DataError, Dataset, Sample, pick, read_text
from gcdbench.parsers.base import GrammarSpec

FORMATS = ("auto", "lines", "jsonl", "files")
#: file extensions ``format=auto`` reads as JSON Lines
JSONL_SUFFIXES = (".jsonl",)
JSONL_SHAPE = '{"text": "<the sample>", "id": "<optional id>"}'


def sample_id(raw: str) -> str:
    """``raw`` as a sample id that can name a file in a cell's folder: ``%``, ``/``, ``\\`` and a leading ``.``
    percent-encoded (``sub/a.toml`` -> ``sub%2Fa.toml``); distinct ids stay distinct."""
    out = raw.replace("%", "%25").replace("/", "%2F").replace("\\", "%5C")
    return "%2E" + out[1:] if out.startswith(".") else out


def sample_format(samples: Path, fmt: str, glob: str | None) -> str:
    """The format ``samples`` is read in: ``fmt``, or for ``auto`` the one its folder-ness and extension name.
    A format that does not fit the path raises :class:`DataError` with the fix."""
    if fmt not in FORMATS:
        raise DataError(f"dataset.format={fmt!r} is not a format; valid: {list(FORMATS)} (auto: a folder is files, "
                        f"a {'/'.join(JSONL_SUFFIXES)} file jsonl, any other file lines)")
    folder = samples.is_dir()
    if fmt == "auto":
        fmt = "files" if folder else "jsonl" if _stem(samples).suffix.lower() in JSONL_SUFFIXES else "lines"
    if fmt == "files" and not folder:
        raise DataError(f"dataset.format=files reads a folder, but dataset.samples={samples} is a file: give the "
                        "folder of sample files (with dataset.glob=<pattern>), or dataset.format=lines|jsonl|auto "
                        "for this file")
    if fmt != "files" and folder:
        raise DataError(f"dataset.format={fmt} reads one file, but dataset.samples={samples} is a folder: give "
                        "dataset.format=files (one sample per file, with dataset.glob=<pattern>), or the path of "
                        "a file")
    if glob is not None and fmt != "files":
        raise DataError(f"dataset.glob={glob!r} picks files in a folder, but dataset.samples={samples} is read as "
                        f"{fmt}: give a folder as dataset.samples, or leave dataset.glob out")
    return fmt


def _stem(path: Path) -> Path:
    """``path`` without a ``.gz`` ending (``docs.jsonl.gz``: ``docs.jsonl``; read_text decompresses it)."""
    return path.with_name(path.name[:-3]) if path.name.endswith(".gz") else path


def _text(path: Path, what: str, fix: str = "") -> str:
    """The UTF-8 text of ``path``; not UTF-8 or a NUL byte (a binary file) raises :class:`DataError` naming it."""
    try:
        text = read_text(path, what)
    except DataError as err:
        raise DataError(f"{err}{fix}") from None
    nul = text.find("\0")
    if nul >= 0:
        line = text.count("\n", 0, nul) + 1
        raise DataError(f"{what} {path} holds a NUL byte (line {line}): a binary file, not text; give a text file"
                        f"{fix}")
    return text


def read_lines(path: Path) -> list[Sample]:
    """One sample per non-blank line of ``path``."""
    lines = [ln for ln in _text(path, "samples file").splitlines() if ln.strip()]
    if not lines:
        raise DataError(f"samples file {path} has no non-empty line: write one sample per line (or samples with "
                        "newlines as JSON Lines, or as a folder of files with dataset.format=files)")
    return [Sample(f"{_stem(path).stem}-{i:04d}", ln) for i, ln in enumerate(lines)]


def read_jsonl(path: Path) -> list[Sample]:
    """One sample per JSON object line of ``path`` (``text``, optional ``id``)."""
    samples, seen = [], {}
    # lines end at "\n" only (JSON Lines): a JSON string may hold U+2028 or U+0085, which str.splitlines splits at
    for lineno, line in enumerate(_text(path, "samples file").split("\n"), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as err:
            raise DataError(f"samples file {path} line {lineno} is not JSON ({err}): write one JSON object per line, "
                            f"{JSONL_SHAPE} (a file of other text: dataset.format=lines)") from None
        if not isinstance(row, dict) or not isinstance(row.get("text"), str):
            got = ("its \"text\" is not a string" if isinstance(row, dict) and "text" in row
                   else "it has no \"text\"" if isinstance(row, dict) else f"it is a JSON {type(row).__name__}")
            raise DataError(f"samples file {path} line {lineno}: {got}; write each line as {JSONL_SHAPE}")
        raw = row.get("id")
        if raw is not None and (isinstance(raw, bool) or not isinstance(raw, (str, int))):
            raise DataError(f"samples file {path} line {lineno}: its \"id\" {raw!r} is not a string or a whole "
                            "number; give a string id, or leave \"id\" out")
        sid = sample_id(str(raw)) if raw is not None and str(raw) != "" else \
            f"{_stem(path).stem}-{len(samples):04d}"
        if sid in seen:
            raise DataError(f"samples file {path} line {lineno}: id {sid!r} repeats line {seen[sid]}'s; give each "
                            "sample its own id, or leave \"id\" out")
        seen[sid] = lineno
        samples.append(Sample(sid, row["text"]))
    if not samples:
        raise DataError(f"samples file {path} has no JSON line: write one object per line, {JSONL_SHAPE}")
    return samples


def read_files(folder: Path, glob: str | None) -> list[Sample]:
    """One sample per file under ``folder`` that ``glob`` matches (default ``**/*``: every file), sorted by
    relative path; names starting with ``.`` are left out."""
    pattern = glob or "**/*"
    try:
        matched = list(folder.glob(pattern))
    except (ValueError, NotImplementedError) as err:
        raise DataError(f"dataset.glob={pattern!r} is not a pattern of files in {folder} ({err}): give one relative "
                        "to the folder, e.g. dataset.glob='*.toml'") from None
    files = sorted((p for p in matched if p.is_file() and not any(
        part.startswith(".") for part in p.relative_to(folder).parts)), key=lambda p: p.relative_to(folder).as_posix())
    if not files:
        present = sorted({f"*{p.suffix}" if p.suffix else p.name for p in folder.rglob("*") if p.is_file()
                          and not any(part.startswith(".") for part in p.relative_to(folder).parts)})
        has = (f"its files: {', '.join(present[:8])}{', ...' if len(present) > 8 else ''}" if present
               else "it holds no file")
        raise DataError(f"dataset.samples={folder}: no file matches dataset.glob={pattern!r} ({has}): give the "
                        "pattern of its sample files, e.g. dataset.glob='*.toml' ('**/*.toml' for subfolders too)")
    fix = f"; or leave it out of the samples with a narrower dataset.glob (now {pattern!r})"
    samples = []
    for p in files:
        text = _text(p, "sample file", fix)
        if not text.strip():
            raise DataError(f"sample file {p} is empty: write the sample into it, delete it, or leave it out with a "
                            f"narrower dataset.glob (now {pattern!r})")
        samples.append(Sample(sample_id(p.relative_to(folder).as_posix()), text))
    return samples


def load_custom(grammar_path, samples_path, start="start", n=None, seed=0, format="auto", glob=None) -> Dataset:
    """Any ``.lark`` grammar with the user's samples (``dataset=custom``; the formats are in the module's doc)."""
    if not grammar_path or not samples_path:
        raise ValueError("dataset=custom needs dataset.grammar=<file.lark> and dataset.samples=<file, one sample per "
                         "line | .jsonl file | folder of sample files>")
    g, s = Path(grammar_path), Path(samples_path)
    for p in (g, s):
        if not p.exists():
            raise FileNotFoundError(f"dataset=custom: no file {p}")
    fmt = sample_format(s, format, glob)
    samples = read_files(s, glob) if fmt == "files" else read_jsonl(s) if fmt == "jsonl" else read_lines(s)
    grammar = GrammarSpec(name=_stem(g).stem, lark=read_text(g, "grammar"), start=start, path=str(g))
    source = f"{s}/{glob or '**/*'}" if fmt == "files" else str(s)
    return Dataset(name=f"custom_{_stem(g).stem}", grammar=grammar, samples=pick(samples, n, seed),
                   meta={"source": source, "format": fmt})


# -- registration (pyproject.toml, entry-point group gcdbench.datasets) --------------------------------------
from gcdbench.datasets.registry import loader  # noqa: E402 - the registry imports this module lazily, by name


@loader(grammar=(None, "path to a .lark file"),
        samples=(None, "the samples: a text file (one per line), a .jsonl file ({\"text\", \"id\"} per line) or a "
                       "folder (one per file)"),
        start=("start", "the start rule"),
        format=("auto", "how samples is read: lines | jsonl | files | auto (a folder: files; .jsonl: jsonl; "
                        "else lines)"),
        glob=(None, "format=files: the sample files' pattern in the folder, e.g. *.toml or **/*.toml (default: every "
                    "file, subfolders included)"))
def custom(name, dcfg, data_root, n, seed) -> Dataset:
    return load_custom(dcfg["grammar"], dcfg["samples"], dcfg["start"], n, seed, format=dcfg["format"],
                       glob=dcfg["glob"])
