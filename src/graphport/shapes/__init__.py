"""Symbolic shapes: the dynamic-shapes spec, symbols and their ranges, guards, and the shape contract."""
