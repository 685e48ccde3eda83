"""gcdbench.parsers"""
