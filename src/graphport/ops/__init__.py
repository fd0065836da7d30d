"""Operator semantics shared by capture, passes, the verifier and (later) serde and interop:
what kind of operator a call is, its functional variant, its side effects, how a write
through a view reaches the view's base, and which operators stay whole at each IR level."""
