"""Engine registry: an engine is named by an entry point of the ``gcdbench.engines`` group (``name =
"package.module:Class"``), imported only when that engine is selected. The project's own engines are listed in
its pyproject.toml; an engine kept in another pip-installable package declares the same group in its own and
appears by name with no edit here. ``"package.module:Class"`` also works as a name, for an engine not installed.

``python -m gcdbench.parsers.registry --options`` prints every engine's options as markdown tables (the docs'
engine-options section is this output).
"""
from __future__ import annotations

import functools
import importlib
import typing
from importlib.metadata import entry_points

from gcdbench.parsers.base import Engine, option_specs

GROUP = "gcdbench.engines"
#: an engine of the project itself: its absence means the project's install is stale (entry points missing)
BUILT_IN = "reference"


@functools.lru_cache(maxsize=None)
def _entry_points() -> dict[str, str]:
    found = {ep.name: ep.value for ep in entry_points(group=GROUP)}
    if BUILT_IN not in found:
        raise ValueError(f"no engine is registered under the entry-point group {GROUP!r} (the project's own are "
                         "listed in its pyproject.toml): reinstall it with `pip install --no-deps -e .`")
    return found


def engines() -> dict[str, str]:
    """Every registered engine: name -> ``"package.module:Class"`` (the built-in ones and installed plug-ins)."""
    return dict(sorted(_entry_points().items()))


def own_engines() -> list[str]:
    """The project's own engines (the README's tables list these; plug-ins installed here are left out)."""
    return [name for name, target in engines().items() if target.startswith("gcdbench.")]


def __getattr__(name: str):
    if name == "ENGINES":   # the registered engines, read when asked (plug-ins installed later are seen too)
        return engines()
    raise AttributeError(name)


def engine_class(name: str, runnable: bool = True) -> type[Engine]:
    """The class registered as ``name``; ``"package.module:Class"`` also works, for engines kept elsewhere.
    ``runnable``: an engine whose packages are absent here (``Engine.missing()``) is refused, saying what to
    install; False: its class all the same (its options are read without them)."""
    known = engines()
    target = name if ":" in name else known.get(name)
    if target is None:
        raise ValueError(f"unknown engine {name!r}; valid: {sorted(known)} or 'package.module:Class'")
    module, _, cls = target.partition(":")
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as err:
        raise ValueError(f"engine {name!r} could not be imported ({err}); is its package installed?") from err
    got = getattr(mod, cls, None)
    # checked before anything calls it: engine.name=os:system names a function, not an engine (issue 27, item 7)
    if not (isinstance(got, type) and issubclass(got, Engine)):
        raise ValueError(f"engine {name!r}: {module}.{cls} is "
                         + ("missing" if got is None else f"a {type(got).__name__}, not a subclass of "
                            "gcdbench.parsers.base.Engine") + f"; valid: {sorted(known)} or 'package.module:Class'")
    why = got.missing() if runnable else None
    if why:
        raise ValueError(f"engine {name!r} could not be imported ({why}); is its package installed?")
    return got


def create_engine(name: str, **options) -> Engine:
    return engine_class(name)(**options)


def available() -> list[str]:
    """Engines whose module imports on this machine."""
    out = []
    for name in engines():
        try:
            engine_class(name)
            out.append(name)
        except ValueError:
            pass
    return out


def current_options(engine: str, stored: dict) -> dict:
    """Engine options as stored by an older gcdbench (``run.json`` ``identity.engine_options``) under today's names:
    an option declared with ``former=`` is renamed (e.g. ``use_cache`` -> ``cache``). Unknown engines: as is."""
    try:
        specs = option_specs(engine_class(engine, runnable=False).Options)
    except ValueError:
        return stored
    renamed = {s.former: s.name for s in specs if s.former and s.name not in stored}
    return {renamed.get(k, k): v for k, v in stored.items()}


# -- option tables (README, --help) --------------------------------------------------------------------------
def _type_name(tp) -> str:
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if args:
        return " \\| ".join(_type_name(a) for a in args) + " \\| null"
    return getattr(tp, "__name__", str(tp))


def options_markdown(names: list[str] | None = None) -> str:
    """One markdown table per engine (option, type, default, allowed values, help), from the declared specs."""
    parts = []
    for name in names or list(engines()):
        try:
            cls = engine_class(name, runnable=False)
        except ValueError as err:
            parts.append(f"#### `engine={name}`\n\nNot importable here: {err}\n")
            continue
        specs = option_specs(cls.Options)
        head = f"#### `engine={name}`" + (f" (thread option: `{cls.threads_option}`)" if cls.threads_option else "")
        if not specs:
            parts.append(f"{head}\n\nNo options.\n")
            continue
        rows = ["| option | type | default | allowed | what |", "|---|---|---|---|---|"]
        for s in specs:
            default = "null" if s.default is None else str(s.default).lower() if isinstance(s.default, bool) \
                else str(s.default)
            allowed = ", ".join(f"`{c}`" for c in s.choices) if s.choices else ""
            rows.append(f"| `{s.name}` | {_type_name(s.type)} | `{default}` | {allowed} | "
                        f"{s.help.replace('|', chr(92) + '|')} |")
        parts.append(head + "\n\n" + "\n".join(rows) + "\n")
    return "\n".join(parts)


BEGIN, END = "<!-- engine-options:begin -->\n", "<!-- engine-options:end -->"
#: the page whose engine-options section the tables are (tests/test_engine_spec.py checks it is current)
DOCS_PAGE = "docs/reference/engine-options.md"


def write_readme(path) -> None:
    """Replace the text between the engine-options marker comments of the page at ``path`` (default ``docs/reference/engine-options.md``)."""
    from pathlib import Path

    text = Path(path).read_text()
    head, sep, rest = text.partition(BEGIN)
    _, sep2, tail = rest.partition(END)
    if not (sep and sep2):
        raise SystemExit(f"{path} has no {BEGIN.strip()} ... {END} section")
    Path(path).write_text(head + BEGIN + options_markdown(own_engines()) + END + tail)


def main(argv=None) -> None:
    import argparse
    from pathlib import Path

    p = argparse.ArgumentParser(prog="python -m gcdbench.parsers.registry", description=__doc__.split("\n\n")[0])
    p.add_argument("--options", action="store_true", help="print every engine's options as markdown tables")
    p.add_argument("--readme", nargs="?", const=str(Path(__file__).resolve().parents[1] / DOCS_PAGE),
                   help="with --options: write them into this page's engine-options section (default: the "
                        f"project's {DOCS_PAGE}, the documentation site's Engine options page)")
    p.add_argument("engines", nargs="*", help="only these engines (default: every registered one)")
    args = p.parse_args(argv)
    if args.options and args.readme:
        write_readme(args.readme)
    elif args.options:
        print(options_markdown(args.engines or None), end="")
    else:
        for name, target in engines().items():
            print(f"{name}\t{target}")


if __name__ == "__main__":
    main()
