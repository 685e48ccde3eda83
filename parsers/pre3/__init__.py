"""gcdbench.parsers.pre3"""
