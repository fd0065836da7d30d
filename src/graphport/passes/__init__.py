"""Passes over a captured program: small-size proofs, lowering, decided conds, the verifier,
device moves. The public one is `move_to_device_pass`, where torch.export keeps it
(`torch.export.passes.move_to_device_pass`); it loads on first use, so that importing the
verifier (which the program record does) does not import the passes that build programs."""


def __getattr__(name: str):
    if name == "move_to_device_pass":
        from .device import move_to_device_pass
        return move_to_device_pass
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["move_to_device_pass"]
