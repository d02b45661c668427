"""Command-line views.  They present analysis results and compute nothing."""
