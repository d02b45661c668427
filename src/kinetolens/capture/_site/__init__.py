"""Holds the ``sitecustomize`` that ``kinetolens run`` puts on PYTHONPATH.

A package (not a bare folder) only so that wheels ship the file.
"""
