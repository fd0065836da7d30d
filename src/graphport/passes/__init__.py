"""Passes over a captured program: small-size proofs, lowering, decided conds, the verifier."""
