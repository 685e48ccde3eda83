"""MkDocs hook: the dataset options page, generated at build time from the loaders' declarations.

Each registered dataset's loader declares its options once (``gcdbench.datasets.registry.loader``); this hook
writes ``reference/dataset-options.md`` from those declarations, so the page cannot go stale. (The engine options
and the result files are generated into committed pages instead, by ``python -m gcdbench.parsers.registry
--options --readme`` and ``python -m gcdbench.experiments.schema --readme``, which tests check.)
"""
from __future__ import annotations

from mkdocs.structure.files import File

PAGE = "reference/dataset-options.md"


def _cell(value) -> str:
    text = "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
    return text.replace("|", "\\|")


def dataset_options_markdown() -> str:
    from gcdbench.datasets.registry import dataset_loader, datasets

    parts = ["# Dataset options",
             "Generated at build time from each loader's declaration (`gcdbench.datasets.registry.loader`; "
             "`docs/hooks/tables.py`). `dataset.<option>=...` on the command line sets one; a preset "
             "(`conf/dataset/<preset>.yaml`) is a `defaults:` line naming the dataset plus the keys it changes. "
             "What each dataset is and where its data comes from: [Datasets](../datasets/index.md)."]
    for name, target in datasets().items():
        try:
            load = dataset_loader(name)
        except (ImportError, ValueError) as err:
            parts.append(f"## `dataset={name}`\n\nNot importable here: {err}")
            continue
        head = f"## `dataset={name}`\n\nLoader `{target}`" + ("; highly ambiguous grammar" if load.ambiguous else "") + "."
        if not load.options:
            parts.append(head + "\n\nNo options.")
            continue
        rows = ["| option | default | what |", "|---|---|---|"]
        rows += [f"| `{k}` | `{_cell(load.defaults.get(k))}` | {_cell(h)} |" for k, h in load.options.items()]
        parts.append(head + "\n\n" + "\n".join(rows))
    return "\n\n".join(parts) + "\n"


def on_files(files, config):
    files.append(File.generated(config, PAGE, content=dataset_options_markdown()))
    return files
