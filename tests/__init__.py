"""The test folder is a regular package so that ``tests.<module>`` (the test engines a run config names, e.g.
``engine.name=tests.faulty_engines:Hang``) is always this folder's module, in pytest's process and in the engine's
worker process alike.

Some wheels install a top-level package named ``tests`` into site-packages (arsenal's, pulled by the ``genlm``
extra; transformers-cfg's; SynCode's). A folder without ``__init__.py`` is only a namespace portion, and Python's
import system takes a regular package anywhere on ``sys.path`` over it, so that stray package used to win and
every ``tests.<module>`` import failed. As a regular package, the first ``tests`` on ``sys.path`` wins: the
repository root, which pytest puts first (the folder above the test package; ``python -m pytest`` also starts
there) and which the worker has first too (it starts as ``python -m gcdbench.experiments.worker`` in the same
working directory, and ``-m`` puts that folder first).

The tests' own bare imports (``from runconf import make_cfg``, ``from engines_here import ...``) keep working
through pytest's ``pythonpath = ["tests"]`` (pyproject.toml, [tool.pytest.ini_options]).
"""
