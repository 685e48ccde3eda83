"""What every layer of the harness uses and no engine owns: the git state of this checkout (``gitstate``: the
commit and dirty tree stamped on every result file) and one child process under a time and a memory limit
(``limited``: the runner's worker, the audit's child, PSC's LALR analysis, CFGzip's preprocessor). It sits below
every other module of ``parsers`` and imports none of them."""
