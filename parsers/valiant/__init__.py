"""gcdbench.parsers.valiant"""
