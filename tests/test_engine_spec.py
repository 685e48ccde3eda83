"""The engine spec: each engine declares its options once (``Engine.Options``); Hydra's schema of ``engine/<name>``,
the checks on construction, the README's option tables and the cell labels all come from that declaration."""
from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException

from gcdbench.experiments.config import ConfigError, engine_options, register, validate
from gcdbench.experiments.store import engine_label
from gcdbench.parsers.base import option_specs
from gcdbench.parsers.registry import current_options, engine_class, engines, options_markdown, own_engines

REPO = Path(__file__).resolve().parents[1]
PRESETS = sorted(p.stem for p in (REPO / "conf" / "engine").glob("*.yaml"))


def composed(*overrides, hydra=False):
    register()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides), return_hydra_config=hydra)


def composes_to(*overrides) -> int | None:
    """The run config of ``overrides`` passes :func:`validate`, and holds each override as given: a config group's
    choice (``engine=psc``, ``hydra/launcher=slurm``) is the one Hydra composed, a value (``samples=2``,
    ``hydra.launcher.partition=cpu``) is the one the run reads (later overrides win, as on the command line).
    Returns what :func:`validate` returns (the sample count; None = all)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    cfg = composed(*overrides, hydra=True)
    n = validate(cfg)
    choices = cfg.hydra.runtime.choices
    last = {o.key_or_group: o for o in OverridesParser.create().parse_overrides(list(overrides))}
    for key, o in last.items():
        if o.is_delete():
            assert OmegaConf.select(cfg, key) is None, (key, overrides)
        elif key in choices:
            assert choices[key] == o.value(), (key, choices[key], overrides)
        else:
            got = OmegaConf.select(cfg, key, throw_on_missing=True)
            got = OmegaConf.to_container(got) if OmegaConf.is_config(got) else got
            assert got == o.value(), (key, got, overrides)
    return n


@pytest.mark.parametrize("name", sorted(engines()))
def test_each_option_is_declared_once_with_help(name):
    cls = engine_class(name, runnable=False)
    specs = option_specs(cls.Options)
    assert cls.options() == {s.name: s.default for s in specs}
    for s in specs:
        assert s.help and s.accepts(s.default), (name, s)
        assert s.choices is None or s.default in s.choices
    assert cls.threads_option is None or cls.threads_option in cls.options()


@pytest.mark.parametrize("name", sorted(engines()))
def test_plain_engine_composes_to_its_defaults(name):
    cfg = composed(f"engine={name}")
    assert cfg.engine.name == name and cfg.engine.label is None
    assert engine_options(cfg) == engine_class(name, runnable=False).options()


@pytest.mark.parametrize("preset", PRESETS)
def test_presets_name_their_base_and_change_only_their_keys(preset):
    """A preset is a ``defaults:`` line naming its base engine plus the keys it changes, none repeated at its
    default (so no default lives in two places)."""
    import yaml

    text = yaml.safe_load((REPO / "conf" / "engine" / f"{preset}.yaml").read_text())
    (base,) = [d for d in text.pop("defaults") if d != "_self_"]
    text.pop("label", None)
    defaults = engine_class(base, runnable=False).options()
    assert text and all(k in defaults and defaults[k] != v for k, v in text.items()), text
    cfg = composed(f"engine={preset}")
    assert engine_options(cfg) == {**defaults, **text}


@pytest.mark.parametrize("override, message", [
    ("engine.workers=abc", r"'abc' of type 'str' could not be converted to Integer"),
    ("engine.wokers=8", r"Key 'wokers' not in 'engine valiant \(options: backend, threads, workers"),
    ("engine.cache=maybe", r"'maybe' is not a valid bool"),
])
def test_bad_key_or_type_fails_while_hydra_composes(override, message):
    with pytest.raises(ConfigCompositionException) as err:
        composed("engine=valiant", override)
    assert re.search(message, f"{err.value} {err.value.__cause__}"), f"{err.value} {err.value.__cause__}"


@pytest.mark.parametrize("overrides, message", [
    (["engine=valiant", "engine.backend=gpu"], r"backend='gpu' is not allowed; valid: \['cpu', 'cuda'\]"),
    (["engine=pre3_cuda", "engine.front_end=regex"], r"front_end='regex' is not allowed; valid: \['auto', 'lexer'"),
    (["engine=glrmask", "+engine.flavour=x"], r"unknown option\(s\) \['flavour'\]; valid: \['boundary_mask_strategy'"),
])
def test_bad_value_fails_at_start_naming_the_valid_ones(overrides, message):
    cfg = composed(*overrides)
    with pytest.raises(ConfigError, match=message):
        validate(cfg)


def test_bad_value_fails_on_direct_construction():
    valiant = engine_class("valiant")
    with pytest.raises(ValueError, match=r"backend='gpu' is not allowed; valid: \['cpu', 'cuda'\] \(default 'cpu'\)"):
        valiant(backend="gpu")
    with pytest.raises(ValueError, match=r"workers='8' is not allowed; valid: a int"):
        valiant(workers="8")
    with pytest.raises(ValueError, match=r"threads=True is not allowed"):   # a bool is not a count
        valiant(threads=True)
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['use_cache'\]; valid: \[.*'cache'"):
        engine_class("psc")(use_cache=False)   # a former name is no longer accepted
    assert engine_class("llguidance")(step_max_items=5).opts["step_max_items"] == 5   # int | None
    assert engine_class("psc")(max_build_s=5).opts["max_build_s"] == 5                # an int where a float goes


def test_former_option_names_read_as_todays():
    stored = {"backend": "cpu", "use_cache": True, "threads": 2}
    assert current_options("pre3", stored) == {"backend": "cpu", "cache": True, "threads": 2}
    assert current_options("xgrammar", {"cache_enabled": False}) == {"cache": False}
    assert current_options("not-an-engine", stored) == stored


@functools.lru_cache(maxsize=None)
def _preset_options(preset: str) -> dict:
    return engine_options(composed(f"engine={preset}"))


def _stored_cells():
    for path in sorted((REPO / "results").rglob("run.json")):
        ident = json.loads(path.read_text()).get("identity") or {}
        if isinstance(ident.get("engine_options"), dict) and ident.get("config"):
            yield path, ident


def test_stored_cells_keep_their_labels():
    """Cell labels (folder names under results/) come from the non-default options: every stored cell's options,
    read under today's names, give its stored label again (renamed options kept their labels)."""
    seen = 0
    for path, ident in _stored_cells():
        engine, label = ident["engine"], ident["config"]
        cls = engine_class(engine, runnable=False)
        opts = current_options(engine, ident["engine_options"])
        cls.check_options(opts)   # every stored option is a declared one, of its declared type (an option added
                                  # later is absent from older cells)
        base = label.split("__")[0]
        if base == engine:
            assert engine_label(engine, opts, cls.options()) == label, path
        else:   # a preset: its composed options, plus what batch.threads changed
            preset = _preset_options(base)
            assert engine_label(base, opts, preset) == label, path
        seen += 1
    if not seen:
        pytest.skip("no stored cells under results/ to check")


def test_docs_engine_options_section_is_generated(tmp_path):
    """The site's Engine options page (docs/reference/engine-options.md, in mkdocs.yml's nav) holds
    ``python -m gcdbench.parsers.registry --options`` between its marker comments, and ``--readme`` without a path
    rewrites that page (regenerate it with ``python -m gcdbench.parsers.registry --options --readme``)."""
    from gcdbench.parsers import registry

    page = REPO / registry.DOCS_PAGE
    assert page.relative_to(REPO / "docs").as_posix() in (REPO / "mkdocs.yml").read_text(), \
        f"{registry.DOCS_PAGE} is not in mkdocs.yml's nav"
    text = page.read_text()
    m = re.search(r"<!-- engine-options:begin -->\n(.*?)<!-- engine-options:end -->", text, re.S)
    assert m, f"{registry.DOCS_PAGE} has no engine-options section between its marker comments"
    assert m.group(1) == options_markdown(own_engines()), \
        f"{registry.DOCS_PAGE}'s engine options are stale: run the command above"
    # the writer replaces only the section, and the command's default target is that page
    stale = tmp_path / "page.md"
    stale.write_text("before\n<!-- engine-options:begin -->\nold\n<!-- engine-options:end -->\nafter\n")
    registry.main(["--options", "--readme", str(stale)])
    assert stale.read_text() == ("before\n<!-- engine-options:begin -->\n" + options_markdown(own_engines())
                                 + "<!-- engine-options:end -->\nafter\n")
    from unittest import mock
    with mock.patch.object(registry, "write_readme") as write:
        registry.main(["--options", "--readme"])
    assert Path(write.call_args.args[0]) == page


def test_a_stored_cell_with_former_option_names_resumes():
    """A cell stored before ``use_cache`` became ``cache`` is the same cell (its identity is read under today's
    names), and a real difference is still one."""
    from gcdbench.experiments.store import identity_diff

    defaults = engine_class("psc").options()
    old = {"engine": "psc", "engine_options": {**{k: v for k, v in defaults.items() if k != "cache"}, "use_cache": True}}
    assert identity_diff(old, {"engine": "psc", "engine_options": defaults}, defaults) == []
    changed = {"engine": "psc", "engine_options": {**defaults, "cache": False}}
    assert identity_diff(old, changed, defaults) == ["engine_options: cache=True -> False"]


def _sweep_choices(overrides: list[str]) -> list[list[str]]:
    """One override list per swept value (``key=a,b,c``: each value with the other keys at their first one);
    ``range(a,b)`` stands for its first value."""
    def values(v):
        if v.startswith("range("):
            return [v[6:-1].split(",")[0]]
        return [v] if v.startswith("[") else v.split(",")
    pairs = [(o.split("=", 1)[0], values(o.split("=", 1)[1])) for o in overrides]
    first = [f"{k}={vs[0]}" for k, vs in pairs]
    out = [first]
    for i, (k, vs) in enumerate(pairs):
        out += [first[:i] + [f"{k}={v}"] + first[i + 1:] for v in vs[1:]]
    return out


EXPERIMENTS = sorted(p.stem for p in (REPO / "conf" / "experiment").glob("*.yaml"))


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_preset_composes_with_each_swept_value(experiment):
    import yaml

    text = yaml.safe_load((REPO / "conf" / "experiment" / f"{experiment}.yaml").read_text())
    params = ((text.get("hydra") or {}).get("sweeper") or {}).get("params") or {}
    choices = _sweep_choices([f"{k}={v}" for k, v in params.items()])
    assert choices and all(len(c) == len(params) for c in choices)
    for overrides in choices:
        composes_to(f"experiment={experiment}", *overrides)


def _readme_runs() -> list[list[str]]:
    """The overrides of every ``python -m experiments.run`` command in a shell block of README.md and of the
    documentation site's pages (docs/**/*.md), continuation lines joined."""
    import shlex

    out = []
    for page in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        block, lines = False, []
        for line in page.read_text().splitlines():
            if line.startswith("```"):
                block = not block
                continue
            if not block:
                continue
            if lines and lines[-1].endswith("\\"):
                lines[-1] = lines[-1][:-1] + " " + line.strip()
            else:
                lines.append(line)
        for line in lines:
            if "python -m experiments.run" in line:
                cmd = line.split("python -m experiments.run", 1)[1].split("#")[0].split("&&")[0]
                # the shard lists the docs write as $(seq -s, -f '%g/N' 0 M): what the shell makes of them
                cmd = re.sub(r"\$\(seq -s, -f '%g/(\d+)' 0 (\d+)\)",
                             lambda m: ",".join(f"{i}/{m.group(1)}" for i in range(int(m.group(2)) + 1)), cmd)
                args = [a for a in shlex.split(cmd) if "=" in a]
                if args not in out:
                    out.append(args)
    assert len(out) > 20, "README.md and docs/ hold fewer run commands than expected: is docs/ there?"
    return out


@pytest.mark.parametrize("args", _readme_runs(), ids=" ".join)
def test_readme_run_commands_compose(args):
    for overrides in _sweep_choices(args):
        composes_to(*overrides)
