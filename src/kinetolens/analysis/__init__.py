"""Pure functions from the trace model to tables.  No file I/O here."""
