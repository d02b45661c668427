"""Views package for rendered outputs: pictures and documents made from analysis tables.

A view takes the polars tables an analysis returned and turns them into a
file format (SVG, later HTML); it computes no new figures and reads no traces.
"""
