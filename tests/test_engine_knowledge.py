"""What is particular to an engine lives on its adapter: the language it implements (``profile()``), its
complexity class, its artifact keys, its options and its view of the vocabulary. Nothing in ``experiments/`` or in
the tokenizers names an engine (in a string, an identifier, an import or a shell script) or reads an option only
one engine has, and an engine kept outside the project (one adapter file) runs through the runner and the report
without an edit anywhere else.
"""
from __future__ import annotations

import ast
import collections
import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from gcdbench.parsers.base import Engine, GrammarSpec, Profile, option
try:
    from engines_here import engine_params
except ImportError:      # imported by a worker as tests.test_engine_knowledge (the outside engine below)
    from tests.engines_here import engine_params
from gcdbench.parsers.registry import ENGINES, engine_class

REPO = Path(__file__).resolve().parents[1]
LONGEST = dict(lexing="longest_match", case_fold="unicode_simple")

# Each preset's declared language (README "Lexing differences"; the audit checks masks against it).
PROFILES = {
    "xgrammar": Profile(),
    "xgrammar_bnf": Profile(),
    "xgrammar_lark": Profile(case_fold="ascii", regex_classes="ascii"),
    "llguidance": Profile(**LONGEST, trailing_ignore=False, regex_classes="uts18"),
    "llguidance_raised": Profile(**LONGEST, trailing_ignore=False, regex_classes="uts18"),
    "llguidance_unforced": Profile(**LONGEST, trailing_ignore=False, regex_classes="uts18"),
    "glrmask": Profile(lexing="dynamic", case_fold="unicode_simple"),
    "psc": Profile(lexing="standard"),
    "psc_shift": Profile(lexing="standard"),   # Lark's shift resolution: the audit shows what it drops
    "valiant": Profile(),
    "cfgzip": Profile(),
    "cfgzip_fixed": Profile(),
    "pre3": Profile(lexing="standard"),   # front_end auto, before compile (it may pick bytes: then Profile())
    "valiant_cuda": Profile(),
    "pre3_cuda": Profile(lexing="standard"),
    "pre3_shift": Profile(lexing="standard"),
    "kbnf": Profile(),
    "llamacpp": Profile(),
    "syncode": Profile(lexing="standard", leading_ignore=True, case_fold="ascii"),
    "genlm": Profile(),
    "transformers_cfg": Profile(token_bytes="latin1"),   # its byte path (mask_path auto, before compile)
    "xgrammar_schema": Profile(),    # its own JSON Schema compiler: the schema's language
    "llguidance_schema": Profile(),
    "null_engine": Profile(),   # the harness's floor: allows every token, not audited (audit_skip; issue 66)
}
COMPLEXITY = {   # engine -> (unambiguous grammar, highly ambiguous grammar)
    "xgrammar": ("?", "?"), "llguidance": ("O(n)", "O(n^3)"), "glrmask": ("O(n^3)", "O(n^3)"),
    "psc": ("O(n)", "O(n)"), "valiant": ("O(n^3)", "O(n^3)"), "cfgzip": ("?", "?"), "pre3": ("O(n)", "O(n)"),
    "kbnf": ("O(n^3)", "O(n^3)"), "llamacpp": ("O(n)", "O(exp n)"), "syncode": ("O(n)", "O(n)"),
    "genlm": ("O(n^3)", "O(n^3)"), "transformers_cfg": ("O(n)", "O(exp n)"),
}


def engine_config(name: str) -> dict:
    """The ``engine`` node ``engine=<name>`` composes to (a registered engine's schema or a preset in conf/engine/)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from gcdbench.experiments.config import register

    register()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return OmegaConf.to_container(compose(config_name="config", overrides=[f"engine={name}"]).engine)


def preset(name: str) -> Engine:
    conf = engine_config(name)
    conf.pop("label", None)
    return engine_class(conf.pop("name"))(**conf)


def preset_params():
    out = []
    for name in sorted(PROFILES):
        base = name if name in ENGINES else yaml.safe_load((REPO / "conf" / "engine" / f"{name}.yaml").read_text())[
            "defaults"][0]
        skip = [m for p in engine_params([base]) for m in p.marks]
        out.append(pytest.param(name, id=name, marks=skip))
    return out


@pytest.mark.parametrize("name", preset_params())
def test_each_preset_declares_its_language(name):
    assert preset(name).profile() == PROFILES[name]


def test_every_preset_has_a_declared_profile():
    presets = ({p.stem for p in (REPO / "conf" / "engine").glob("*.yaml")} | set(ENGINES)) - {"reference"}
    assert presets == set(PROFILES), "a preset without an entry here: add its declared profile"


def test_profile_follows_the_options():
    assert engine_class("glrmask")(grammar_form="lark").profile() == Profile(lexing="dynamic", case_fold="unicode_simple",
                                                                           leading_ignore=True)
    assert engine_class("glrmask")(grammar_form="normalized").profile().leading_ignore
    assert engine_class("psc")(leading_ignore=True).profile() == Profile(lexing="standard", leading_ignore=True)


@pytest.mark.parametrize("name", engine_params())
def test_complexity_is_declared_by_the_class(name):
    cls = engine_class(name)
    got = (cls.complexity(False), cls.complexity(True))
    if name in COMPLEXITY:
        assert got == COMPLEXITY[name]
    assert all(c == "?" or re.fullmatch(r"O\(.+\)", c) for c in got), got


@pytest.mark.parametrize("name", ["valiant", "psc"])
def test_artifact_keys_point_into_info(name, bytes_tokenizer, tmp_path):
    """Every column an engine declares for the report's artifact table is a number its info() reports."""
    eng = engine_class(name)(cache_dir=str(tmp_path))
    eng.compile(GrammarSpec("list", 'start: NAME ("," NAME)*\nNAME: /[a-z]+/\n%ignore " "\n'), bytes_tokenizer)
    assert eng.artifact_keys
    for column, path in eng.artifact_keys.items():
        v = eng.info()
        for k in path:
            v = v[k]
        assert isinstance(v, int) and v > 0, (column, path, v)


# -- no engine knowledge outside the adapters ------------------------------------------------------------
ENGINE_WORDS = re.compile(r"\b(" + "|".join(n for n in ENGINES if n != "reference") + r")", re.IGNORECASE)
# plain words a harness uses for its own things too (a batch identity's "mode"): not read as an engine's option
COMMON_WORDS = {"mode", "parser", "lexer", "chunk"}


def _single_engine_options() -> set[str]:
    """Option names that exactly one registered engine declares (``workers``: Valiant's), common words left out."""
    owners = collections.defaultdict(set)
    for name in ENGINES:
        for key in engine_class(name, runnable=False).options():
            owners[key].add(name)
    return {k for k, v in owners.items() if len(v) == 1} - COMMON_WORDS


ENGINE_OPTIONS = _single_engine_options()
# Files that still hold engine knowledge, each with the reason and who moves it (issue 26); a file listed
# here that holds none any more fails the test below, so the list shrinks as they are fixed.
PENDING: dict[str, str] = {}
SCANNED = sorted({*(p.relative_to(REPO).as_posix() for p in (REPO / "experiments").rglob("*.py")),
                  *(p.relative_to(REPO).as_posix() for p in (REPO / "experiments").rglob("*.sh")),
                  "parsers/tokenizers.py", "parsers/hf_tokenizer.py"})


def engine_names_in_code(path: Path) -> list[str]:
    """What names an engine in Python code: string constants (docstrings left out: prose may give examples),
    identifiers, imported modules and names (``from gcdbench.parsers.valiant import ...``, ``import xgrammar``),
    and string constants that are an option only one engine has (``opts["workers"]``)."""
    tree = ast.parse(path.read_text())
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    found = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings:
            texts = [n.value]
            if n.value in ENGINE_OPTIONS:
                found.append(f"line {n.lineno}: option {n.value!r} of one engine")
        elif isinstance(n, ast.Name):
            texts = [n.id]
        elif isinstance(n, ast.Attribute):
            texts = [n.attr]
        elif isinstance(n, ast.Import):
            texts = [a.name for a in n.names]
        elif isinstance(n, ast.ImportFrom):
            texts = [n.module or "", *(a.name for a in n.names)]
        else:
            continue
        found += [f"line {n.lineno}: {text[:60]!r}" for text in texts if ENGINE_WORDS.search(text)]
    return found


def engine_names_in_shell(path: Path) -> list[str]:
    """Lines of a shell script that name an engine outside comments (``engine=valiant``, ``import ...valiant``)."""
    found = []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        code = line if line.lstrip().startswith("#!") else re.sub(r"(^|\s)#.*", "", line)
        found += [f"line {i}: {code.strip()[:60]!r}"] if ENGINE_WORDS.search(code) else []
    return found


def engine_knowledge(rel: str) -> list[str]:
    path = REPO / rel
    return engine_names_in_shell(path) if path.suffix == ".sh" else engine_names_in_code(path)


@pytest.mark.parametrize("rel", SCANNED)
def test_no_engine_names_outside_the_adapters(rel):
    found = engine_knowledge(rel)
    if rel in PENDING:
        assert found, f"{rel} holds no engine knowledge any more: remove it from PENDING"
    else:
        assert not found, f"{rel} names engines ({found[:5]}); move that knowledge onto the adapters"


def test_the_guard_reads_imports_options_and_shell_scripts(tmp_path):
    """Each way of naming an engine is caught: an import, an option only one engine has, a shell command."""
    code = tmp_path / "x.py"
    code.write_text('"""Valiant in prose is fine."""\nfrom gcdbench.parsers.psc import engine\nimport kbnf as k\n'
                    'w = opts.get("workers")\nt = opts.get("threads")\n')
    found = engine_names_in_code(code)
    assert [f.split(":")[0] for f in found] == ["line 2", "line 3", "line 4"], found
    script = tmp_path / "x.sh"
    script.write_text("#!/usr/bin/env bash\n# engine=valiant in a comment is prose\npython -m x engine=pre3 # run\n")
    assert engine_names_in_shell(script) == ["line 3: 'python -m x engine=pre3'"]


# -- a new engine: one adapter file (this module) + one config file -------------------------------------
@dataclass
class ToyOptions:
    flavour: str = option("plain", "what info() reports", choices=("plain", "spicy"))


class ToyEngine(Engine):
    """The reference checker under a new name, with its own complexity class, artifact and option."""

    name = "toy"
    artifact_keys = {"grammar bytes": ("sizes", "grammar_bytes")}
    Options = ToyOptions

    @classmethod
    def complexity(cls, ambiguous: bool = False) -> str:
        return "O(toy^3)" if ambiguous else "O(toy)"

    def version(self) -> str:
        return "toy-1"

    def compile(self, grammar, tokenizer) -> None:
        from gcdbench.parsers.reference import ReferenceChecker

        self.checker, self.tok, self.size = ReferenceChecker(grammar), tokenizer, len(grammar.lark.encode())
        self.reset()

    def reset(self) -> None:
        self.state = self.checker.initial()

    def fill_mask(self, out) -> None:
        from gcdbench.parsers.base import ids_to_mask

        out[:] = ids_to_mask(self.checker.full_mask_ids(self.state, self.tok), self.tok.vocab_size)

    def commit(self, token_id: int) -> bool:
        from gcdbench.parsers.reference import DEAD

        data = self.tok.token_bytes[token_id]
        self.state = self.checker.advance(self.state, data) if data else DEAD
        return self.state != DEAD

    def info(self) -> dict:
        return {"sizes": {"grammar_bytes": self.size}, "flavour": self.opts["flavour"]}


@pytest.mark.slow
def test_an_engine_from_outside_runs_through_runner_and_report(tmp_path):
    from hydra import compose, initialize_config_dir

    from gcdbench.experiments.config import register
    from gcdbench.experiments.report import artifacts, collect, table1
    from gcdbench.experiments.runner import run

    conf = tmp_path / "conf" / "engine"
    conf.mkdir(parents=True)
    # the worker runs as `python -m` from the repository root: it imports this module as tests.<name>
    (conf / "toy.yaml").write_text("name: tests.test_engine_knowledge:ToyEngine\nflavour: spicy\n")
    grammar, samples = tmp_path / "words.lark", tmp_path / "words.txt"
    grammar.write_text('start: WORD (" " WORD)*\nWORD: /[a-z]+/\n')
    samples.write_text("ab cd\nxyz\n")
    register()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[
            f"hydra.searchpath=[file://{tmp_path / 'conf'}]", "engine=toy", "tokenizer=bytes", "progress=false",
            f"out_dir={tmp_path / 'runs'}", "dataset=custom", f"dataset.grammar={grammar}",
            f"dataset.samples={samples}", "dataset.ambiguous=true", "audit.per_sample=2"])
    out = run(cfg)
    meta = json.loads((out / "run.json").read_text())
    assert meta["inits"][0]["engine_info"]["flavour"] == "spicy" and meta["dataset_meta"]["ambiguous"] is True

    cells = collect(tmp_path / "runs")
    t, notes = table1(cells, tokenizer="bytes")
    (row,) = t.to_dict("records")
    assert row["custom_words Cmplx."] == "O(toy^3)" and row["custom_words Pass"] == "2/2"
    # the only note a clean cell can get depends on the checkout (a provenance mark when run on a dirty tree)
    assert all("not from one clean commit" in n for n in notes), notes
    (art,) = artifacts(tmp_path / "runs").values()
    assert art.to_dict("records") == [{"dataset": "custom_words", "tokenizer": "bytes",
                                       "grammar bytes": len(grammar.read_text().encode())}]
