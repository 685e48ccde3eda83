"""MkDocs hook: the committed report as pages of the site.

At build time it reads ``results/README.md`` (written by ``python -m experiments.report``), cuts it at its ``## ``
sections, one page each under ``results/``, adds ``results/cliffs.md`` (the Cliffs section, written by
``cliffs section``) and the committed figures ``results/figures/*.png`` as generated files, and lists the pages in
the nav's "Results" entry. Nothing is copied into ``docs/``: the pages are the committed files, as they are.

Each page starts with where its cells come from: the report's own "Measured at ..." and "cells of ..." lines of
that section (commit and machine), and the commit that last changed the report file.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results"
REPORT = RESULTS / "README.md"
EXTRA = [("cliffs.md", "Cliffs: fuzzed grammars")]  # (file under results/, nav title)
#: lines of the report that say which commit and machine cells come from
PROVENANCE = re.compile(r"(Measured at commit|[Cc]ells of (more than one|\d+) commit)")
SECTION_HINT = ("This section names no commit of its own: the report was built from the committed cells of "
                "`results/runs` and the other folders its command names; each cell's commit and machine are on "
                "the [Every cell](every-cell.md) page and in its `run.json`.")


def _slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") or "section"


def _last_commit(path: Path) -> str:
    try:
        out = subprocess.run(["git", "log", "-1", "--format=%h (%cs)", "--", str(path)], cwd=ROOT,
                             capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        out = ""
    return out or "not committed"


def _sections(text: str) -> tuple[str, list[tuple[str, str]]]:
    """(the text before the first ``## ``, [(title, body with its heading)]), code blocks respected."""
    head, parts, code = [], [], False
    for line in text.splitlines():
        if line.startswith("```"):
            code = not code
        if not code and line.startswith("## "):
            parts.append([line[3:].strip(), [line]])
        elif parts:
            parts[-1][1].append(line)
        else:
            head.append(line)
    return "\n".join(head), [(t, "\n".join(b)) for t, b in parts]


def _provenance(body: str, source: Path) -> str:
    lines = [ln.strip() for ln in body.splitlines() if PROVENANCE.search(ln)]
    said = []
    for ln in lines:
        # a long paragraph: keep the sentence that names the commits
        m = re.search(r"(Measured at commit[^\n]*?\.(?=\s|$)|\*\*[Cc]ells of[^\n]*)", ln)
        said.append(m.group(1) if m else ln)
    where = (" ".join(dict.fromkeys(said))) if said else SECTION_HINT
    return (f'!!! info "Where these cells come from"\n    {where}\n\n'
            f"    Generated from `{source.relative_to(ROOT)}`, last changed at commit {_last_commit(source)}.\n\n")


def _pages() -> list[tuple[str, str, str]]:
    """[(path under docs, nav title, markdown)]"""
    if not REPORT.is_file():
        raise SystemExit(f"{REPORT} is missing: run python -m experiments.report --results results/runs --out results")
    head, sections = _sections(REPORT.read_text())
    pages, links = [], []
    for title, body in sections:
        slug = _slug(title)
        pages.append((f"results/{slug}.md", title, "# " + body[3:].lstrip() .split("\n", 1)[0] + "\n\n"
                      + _provenance(body, REPORT) + body.split("\n", 1)[1].lstrip("\n") + "\n"))
        links.append(f"- [{title}]({slug}.md)")
    for name, title in EXTRA:
        path = RESULTS / name
        if path.is_file():
            text = path.read_text()
            first, _, rest = text.partition("\n")
            pages.append((f"results/{name}", title, "# " + first.lstrip("# ") + "\n\n" + _provenance(text, path)
                          + rest.lstrip("\n")))
            links.append(f"- [{title}]({name})")
    index = (head.replace("# Results", "# Results (the committed report)", 1).rstrip() + "\n\n"
             "The sections of `results/README.md`, one page each, as committed (regenerate them with the report "
             "command above; the site is rebuilt from them):\n\n" + "\n".join(links) + "\n")
    return [("results/index.md", "Results", index)] + pages


def on_config(config):
    nav = config["nav"] or []
    entries = [p for p, _, _ in _pages()]
    for item in nav:
        if isinstance(item, dict) and "Results" in item:
            item["Results"] = entries
    return config


def on_files(files, config):
    for path, _, text in _pages():
        files.append(File.generated(config, path, content=text))
    for png in sorted((RESULTS / "figures").glob("*.png")):
        files.append(File.generated(config, f"results/figures/{png.name}", abs_src_path=str(png)))
    return files
