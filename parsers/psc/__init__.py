"""gcdbench.parsers.psc"""
