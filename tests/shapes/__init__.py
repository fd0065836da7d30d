"""Symbolic shapes corpus (issue 3): dynamic_shapes, Dim, range constraints, guards."""
