"""gcdbench.experiments"""
