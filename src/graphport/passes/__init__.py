"""Passes over exported programs. The public one is `move_to_device_pass`, where
torch.export keeps it (`torch.export.passes.move_to_device_pass`).

It is looked up on first use: the program record itself imports from this package
(`passes.metadata`), so importing the device pass here eagerly would be circular."""


def __getattr__(name: str):
    if name == "move_to_device_pass":
        from .device import move_to_device_pass
        return move_to_device_pass
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["move_to_device_pass"]
