"""Registries: formulas and hardware facts as data plus small functions.

Each module here is a table that grows by one entry per new op, kernel
family or GPU, so analyses stay free of hard-coded special cases.
"""
