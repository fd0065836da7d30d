"""`graphport.experimental`: the API torch.export keeps under `torch.export.experimental`.

`_export_forward_backward(ep, joint_loss_index=0)` makes the joint forward-backward
program of on-device training (passes/joint.py); like torch's, its name says the API may
change.
"""
from __future__ import annotations


def _export_forward_backward(ep, joint_loss_index: int = 0):
    """A new program computing `ep`'s outputs and the gradients of its user output number
    `joint_loss_index` (a scalar loss) with respect to every parameter that requires grad
    and every user input whose example required grad, at the Core ATen level, with the
    backward described by `graph_signature.backward_signature`. As torch.export's."""
    from ..passes.joint import export_forward_backward
    return export_forward_backward(ep, joint_loss_index)


__all__ = ["_export_forward_backward"]
