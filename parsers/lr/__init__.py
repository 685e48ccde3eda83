"""gcdbench.parsers.lr: what PSC and Pre³ share (byte lexer, vocabulary trie, token jobs)."""
