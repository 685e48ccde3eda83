"""``dataset=custom`` with samples that hold newlines: one per line, JSON Lines, a folder of files (issue 64,
item 4); and each mismatch of data and format refused in one line that names the file and the fix."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from gcdbench.datasets.base import DataError
from gcdbench.datasets.registry import dataset_loader, load_dataset

REPO = Path(__file__).resolve().parents[1]

#: JSON-like: white space between tokens is ignored, so one document may be written on one line or on many
JSONISH = r"""
start: value
?value: object | array | STRING | NUMBER | "true" | "false" | "null"
object: "{" [pair ("," pair)*] "}"
pair: STRING ":" value
array: "[" [value ("," value)*] "]"
STRING: /"[^"\\\n]*"/
NUMBER: /-?[0-9]+/
%ignore /[ \t\n]+/
"""

#: TOML-like: every line (a table header, a key = value pair, or nothing) ends with its newline
TOMLISH = r"""
start: line+
line: (table | pair)? NL
table: "[" KEY "]"
pair: KEY " = " value
?value: STRING | NUMBER | array
array: "[" (value (", " value)*)? "]"
KEY: /[a-z_][a-z0-9_]*/
STRING: /"[^"\n]*"/
NUMBER: /-?[0-9]+/
NL: "\n"
"""

DOCS = ['{"name": "demo", "tags": ["a", "b"]}', '[1, 2, {"deep": null}]', '{"empty": {}}']
PRETTY = [json.dumps(json.loads(d), indent=2) for d in DOCS]   # the same documents, over several lines
TOMLS = {"server.toml": '[server]\nhost = "example.org"\nport = 8080\n',
         "app/paths.toml": 'name = "demo"\n\n[paths]\nroots = ["/srv", "/tmp"]\nnumbers = [1, -2, 3]\n'}


def grammar(tmp_path, text=JSONISH, name="jsonish") -> Path:
    g = tmp_path / f"{name}.lark"
    g.write_text(text)
    return g


def load(g, samples, **options):
    return load_dataset({"name": "custom", "grammar": str(g), "samples": str(samples), **options}, data_root=".")


def folder_of(tmp_path, files: dict, name="samples") -> Path:
    root = tmp_path / name
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(text if isinstance(text, bytes) else text.encode())
    root.mkdir(exist_ok=True)
    return root


def test_options_are_declared_once_on_the_loader():
    spec = dataset_loader("custom")
    assert list(spec.options) == ["grammar", "samples", "start", "format", "glob"]
    assert spec.defaults["format"] == "auto" and spec.defaults["glob"] is None


def test_load_custom_is_still_importable_from_the_registry():
    from gcdbench.datasets import custom, registry

    assert registry.load_custom is custom.load_custom and registry.custom is custom.custom


# -- the three formats ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["auto", "lines"])
def test_lines_one_sample_per_line(tmp_path, fmt):
    s = tmp_path / "docs.txt"
    s.write_text("\n".join(DOCS) + "\n\n")
    ds = load(grammar(tmp_path), s, format=fmt)
    assert [x.text for x in ds.samples] == DOCS
    assert [x.id for x in ds.samples] == ["docs-0000", "docs-0001", "docs-0002"]
    assert ds.meta["format"] == "lines" and ds.grammar.name == "jsonish"


@pytest.mark.parametrize("fmt", ["auto", "jsonl"])
def test_jsonl_text_and_optional_id(tmp_path, fmt):
    s = tmp_path / "docs.jsonl"
    rows = [{"text": PRETTY[0], "id": "first"}, {"text": PRETTY[1]}, {"text": PRETTY[2], "id": "src/c.json"},
            {"text": "\n", "id": 7}]
    s.write_text("\n".join(json.dumps(r) for r in rows[:2]) + "\n\n" + "\n".join(json.dumps(r) for r in rows[2:]))
    ds = load(grammar(tmp_path), s, format=fmt)
    assert [x.text for x in ds.samples] == [*PRETTY, "\n"]
    assert all("\n" in x.text for x in ds.samples)
    # a '/' in an id is written %2F: a cell keeps one file per sample, named by its id
    assert [x.id for x in ds.samples] == ["first", "docs-0001", "src%2Fc.json", "7"]
    assert ds.meta["format"] == "jsonl"


def test_gzip_files_are_read_decompressed(tmp_path):
    """Corpora ship gzipped (``../shared/data/code/*.jsonl.gz``): a name ending ``.gz`` is read decompressed, its
    format and ids from the name without that ending; a damaged one is refused by name."""
    import gzip

    s = tmp_path / "docs.jsonl.gz"
    s.write_bytes(gzip.compress("".join(json.dumps({"text": t}) + "\n" for t in PRETTY).encode()))
    ds = load(grammar(tmp_path), s)
    assert [x.text for x in ds.samples] == PRETTY and ds.meta["format"] == "jsonl"
    assert [x.id for x in ds.samples] == ["docs-0000", "docs-0001", "docs-0002"]
    lines = tmp_path / "one.txt.gz"
    lines.write_bytes(gzip.compress("\n".join(DOCS).encode()))
    assert [x.id for x in load(grammar(tmp_path), lines).samples] == ["one-0000", "one-0001", "one-0002"]
    bad = tmp_path / "cut.jsonl.gz"
    bad.write_bytes(s.read_bytes()[:20])
    refused(grammar(tmp_path), bad, names=bad, fix="is not a whole gzip file")


def test_jsonl_lines_end_at_newline_only(tmp_path):
    """A JSON string may hold U+2028 or U+0085 raw (json.dumps with ensure_ascii=False writes them so): a line of
    JSON Lines ends at "\n" only (str.splitlines would cut the object there); a CRLF line end is read too."""
    s = tmp_path / "docs.jsonl"
    texts = ['{"a": "x\u2028y"}', '["\u0085"]', '{"b":\r\n1}']
    s.write_text("".join(json.dumps({"text": t}, ensure_ascii=False) + "\r\n" for t in texts), newline="")
    assert "\u2028" in s.read_text()
    assert [x.text for x in load(grammar(tmp_path), s).samples] == texts


@pytest.mark.parametrize("fmt", ["auto", "files"])
def test_files_one_sample_per_file_sorted_by_path(tmp_path, fmt):
    root = folder_of(tmp_path, {"b.json": PRETTY[0] + "\n", "a.json": PRETTY[1], "sub/c.json": PRETTY[2],
                                "notes.md": "not a sample\n", ".hidden.json": "{}", ".git/x.json": "{}"})
    ds = load(grammar(tmp_path), root, format=fmt, glob="**/*.json")
    assert [x.id for x in ds.samples] == ["a.json", "b.json", "sub%2Fc.json"]
    assert [x.text for x in ds.samples] == [PRETTY[1], PRETTY[0] + "\n", PRETTY[2]]   # verbatim, newlines kept
    assert ds.meta["format"] == "files" and ds.meta["source"] == f"{root}/**/*.json"
    top = load(grammar(tmp_path), root, format=fmt, glob="*.json")
    assert [x.id for x in top.samples] == ["a.json", "b.json"]
    every = load(grammar(tmp_path), root, format=fmt)   # no glob: every file (names starting with '.' left out)
    assert [x.id for x in every.samples] == ["a.json", "b.json", "notes.md", "sub%2Fc.json"]
    assert every.meta["source"] == f"{root}/**/*"


# -- end to end through the runner ------------------------------------------------------------------------------
def _cfg(tmp_path, *overrides):
    from runconf import make_cfg

    return make_cfg(tmp_path / "runs", "samples=all", *overrides)


def _outcomes(out: Path) -> dict:
    df = pd.read_parquet(out / "samples.parquet")
    return dict(zip(df["sample_id"], df["outcome"]))


def test_folder_of_multi_line_samples_runs_ok_on_psc(tmp_path):
    from gcdbench.experiments.runner import run

    root = folder_of(tmp_path, {**TOMLS, "README": "not a sample\n"})
    out = run(_cfg(tmp_path, "engine=psc", "dataset=custom", f"dataset.grammar={grammar(tmp_path, TOMLISH, 'conf')}",
                   f"dataset.samples={root}", "dataset.glob=**/*.toml"))
    assert _outcomes(out) == {"app%2Fpaths.toml": "ok", "server.toml": "ok"}
    steps = pd.read_parquet(out / "steps.parquet")
    assert len(steps) == sum(len(t.encode()) + 1 for t in TOMLS.values())   # every byte, newlines included, + EOS
    meta = json.loads((out / "run.json").read_text())
    assert meta["dataset_meta"]["format"] == "files"
    assert meta["audit"]["steps"] > 0 and meta["audit"]["agree"] == meta["audit"]["steps"]


@pytest.mark.parametrize("fmt", ["lines", "jsonl", "files"])
def test_each_format_runs_ok_on_the_reference(tmp_path, fmt):
    """The JSON-like grammar through the runner: documents one per line, pretty-printed (newlines inside) as JSON
    Lines, and pretty-printed one per file, each with the format left to auto."""
    from gcdbench.experiments.runner import run

    if fmt == "lines":
        s = tmp_path / "docs.txt"
        s.write_text("\n".join(DOCS) + "\n")
        ids = ["docs-0000", "docs-0001", "docs-0002"]
    elif fmt == "jsonl":
        s = tmp_path / "docs.jsonl"
        s.write_text("".join(json.dumps({"text": t, "id": f"doc{i}"}) + "\n" for i, t in enumerate(PRETTY)))
        ids = ["doc0", "doc1", "doc2"]
    else:
        s = folder_of(tmp_path, {f"d/doc{i}.json": t + "\n" for i, t in enumerate(PRETTY)})
        ids = ["d%2Fdoc0.json", "d%2Fdoc1.json", "d%2Fdoc2.json"]
    out = run(_cfg(tmp_path, "engine=reference", "dataset=custom", f"dataset.grammar={grammar(tmp_path)}",
                   f"dataset.samples={s}", "audit.per_sample=0"))
    assert _outcomes(out) == dict.fromkeys(ids, "ok")
    assert json.loads((out / "run.json").read_text())["dataset_meta"]["format"] == fmt


# -- mismatches: one line naming the file and the fix ----------------------------------------------------------
def refused(g, samples, *, names, fix, **options) -> str:
    with pytest.raises(DataError) as err:
        load(g, samples, **options)
    msg = str(err.value)
    assert "\n" not in msg, msg
    assert str(names) in msg, msg
    assert fix in msg, msg
    return msg


def test_jsonl_line_without_text_names_the_line(tmp_path):
    s = tmp_path / "docs.jsonl"
    s.write_text('{"text": "{}"}\n\n{"id": "x", "body": "{}"}\n')
    msg = refused(grammar(tmp_path), s, names=s, fix='write each line as {"text": "<the sample>"')
    assert "line 3: it has no \"text\"" in msg


def test_jsonl_text_that_is_not_a_string(tmp_path):
    s = tmp_path / "docs.jsonl"
    s.write_text('{"text": {"a": 1}}\n')
    refused(grammar(tmp_path), s, names=f"{s} line 1: its \"text\" is not a string", fix="write each line as")


def test_jsonl_line_that_is_not_json(tmp_path):
    s = tmp_path / "docs.jsonl"
    s.write_text('{"text": "{}"}\n' + PRETTY[0] + "\n")   # a pretty-printed document is not JSON Lines
    msg = refused(grammar(tmp_path), s, names=f"{s} line 2 is not JSON", fix="write one JSON object per line")
    assert "dataset.format=lines" in msg


def test_jsonl_ids_that_repeat(tmp_path):
    s = tmp_path / "docs.jsonl"
    s.write_text('{"text": "{}", "id": "a"}\n{"text": "[]", "id": "a"}\n')
    refused(grammar(tmp_path), s, names=f"{s} line 2: id 'a' repeats line 1's", fix="give each sample its own id")


def test_empty_folder(tmp_path):
    root = folder_of(tmp_path, {})
    refused(grammar(tmp_path), root, names=root, fix="give the pattern of its sample files, e.g. dataset.glob=")


def test_glob_matching_nothing_lists_what_is_there(tmp_path):
    root = folder_of(tmp_path, TOMLS)
    msg = refused(grammar(tmp_path), root, glob="*.yaml", names=root, fix="e.g. dataset.glob='*.toml'")
    assert "no file matches dataset.glob='*.yaml' (its files: *.toml)" in msg


def test_glob_on_a_file_is_refused(tmp_path):
    s = tmp_path / "docs.txt"
    s.write_text(DOCS[0])
    refused(grammar(tmp_path), s, glob="*.json", names=s,
            fix="give a folder as dataset.samples, or leave dataset.glob out")


@pytest.mark.parametrize("content,what", [(b'{"a":\x00 1}', "holds a NUL byte (line 1): a binary file"),
                                          (b"\x89PNG\r\n\x1a\n", "is not UTF-8")])
def test_binary_file_in_a_folder_is_named(tmp_path, content, what):
    root = folder_of(tmp_path, {"a.json": PRETTY[0], "logo.json": content})
    msg = refused(grammar(tmp_path), root, glob="*.json", names=root / "logo.json",
                  fix="or leave it out of the samples with a narrower dataset.glob (now '*.json')")
    assert what in msg


@pytest.mark.parametrize("suffix", [".txt", ".jsonl"])
def test_binary_samples_file_is_named(tmp_path, suffix):
    s = tmp_path / f"docs{suffix}"
    s.write_bytes(b'{"text": "{}"}\n\x00\x01\x02\n')
    refused(grammar(tmp_path), s, names=s, fix="holds a NUL byte (line 2): a binary file, not text; give a text file")


def test_format_files_on_a_file(tmp_path):
    s = tmp_path / "docs.txt"
    s.write_text(DOCS[0])
    refused(grammar(tmp_path), s, format="files", names=f"dataset.samples={s} is a file",
            fix="give the folder of sample files (with dataset.glob=<pattern>), or dataset.format=lines|jsonl|auto")


@pytest.mark.parametrize("fmt", ["lines", "jsonl"])
def test_one_file_format_on_a_folder(tmp_path, fmt):
    root = folder_of(tmp_path, TOMLS)
    refused(grammar(tmp_path), root, format=fmt, names=f"dataset.samples={root} is a folder",
            fix="give dataset.format=files (one sample per file, with dataset.glob=<pattern>), or the path of a file")


def test_unknown_format(tmp_path):
    s = tmp_path / "docs.txt"
    s.write_text(DOCS[0])
    refused(grammar(tmp_path), s, format="xml", names="dataset.format='xml'",
            fix="valid: ['auto', 'lines', 'jsonl', 'files']")


@pytest.mark.parametrize("kind", ["lines", "jsonl", "files"])
def test_empty_file(tmp_path, kind):
    if kind == "files":
        root = folder_of(tmp_path, {"a.toml": TOMLS["server.toml"], "b.toml": "\n  \n"})
        refused(grammar(tmp_path), root, names=root / "b.toml", fix="write the sample into it, delete it, or leave "
                                                                    "it out with a narrower dataset.glob")
        return
    s = tmp_path / ("docs.txt" if kind == "lines" else "docs.jsonl")
    s.write_text("\n \n")
    refused(grammar(tmp_path), s, names=s, fix="write one sample per line" if kind == "lines" else
            'write one object per line, {"text": "<the sample>"')


def test_command_line_prints_one_error_line_and_exits_2(tmp_path):
    """The runner's command line prints a data mismatch as ``error: <line>`` and exits 2, before any work."""
    s = tmp_path / "docs.jsonl"
    s.write_text('{"id": "a"}\n')
    r = subprocess.run([sys.executable, "-m", "experiments.run", "engine=reference", "tokenizer=bytes",
                        "dataset=custom", f"dataset.grammar={grammar(tmp_path)}", f"dataset.samples={s}",
                        f"out_dir={tmp_path / 'runs'}"],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert errors == [f'error: samples file {s} line 1: it has no "text"; write each line as '
                      '{"text": "<the sample>", "id": "<optional id>"}'], r.stderr
    assert not list(tmp_path.rglob("run.json"))
