"""Autograd for Kernels: the derived backward (docs/grad.md) as the custom op's autograd formula.

A Kernel that is called on tensors that require grad runs the *forward with residuals* (the spec
`redfuse grad` writes next to the backward: the outputs plus what the backward reads, e.g.
attention's row log-sum-exp) as a custom op whose autograd formula is the derived backward spec,
itself a Kernel and a custom op, so torch.compile traces both.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from . import _redfuse


class Training:
    """The forward-with-residuals and backward kernels of one Kernel, and the autograd formula."""

    def __init__(self, kernel: Any, kernel_type: Any):
        fwd_spec, bwd_spec, adjoints, gradients, notes = _redfuse.grad(kernel._spec, [], False)
        self.notes: List[str] = list(notes)
        self.inputs = kernel.inputs
        self.n_outputs = len(kernel.outputs)
        base = kernel._name or "kernel"
        core = "cpu" if kernel.target == "auto" else kernel.target
        self.forward = kernel_type(_redfuse.compile(fwd_spec, core, **kernel._build), fwd_spec, kernel.target,
                                   f"{base}_train", build=kernel._build)
        self.backward = kernel_type(_redfuse.compile(bwd_spec, core, **kernel._build), bwd_spec, kernel.target,
                                    f"{base}_backward", build=kernel._build)
        self.adjoint_of: Dict[str, str] = dict(adjoints)     # forward output -> its adjoint input (dY)
        self.gradient_of: Dict[str, str] = dict(gradients)   # forward input -> its gradient output (dX)
        self.forward.op.register_autograd(self._backward, setup_context=self._setup)

    def __call__(self, tensors: Sequence[Any]) -> List[Any]:
        """The outputs of the forward (the residuals it also returns stay with autograd)."""
        return list(self.forward.op(list(tensors))[: self.n_outputs])

    def _setup(self, ctx: Any, inputs: Any, output: Any) -> None:
        (tensors,) = inputs
        ctx.n_inputs = len(tensors)
        ctx.save_for_backward(*tensors, *output)

    def _backward(self, ctx: Any, grads: Sequence[Optional[Any]]) -> List[Optional[Any]]:
        import torch  # noqa: PLC0415 - only reached through torch

        saved = ctx.saved_tensors
        ins, outs = saved[: ctx.n_inputs], saved[ctx.n_inputs:]
        by_name: Dict[str, Any] = {s.name: t for s, t in zip(self.inputs, ins)}
        by_name.update({s.name: t for s, t in zip(self.forward.outputs, outs)})
        names = [s.name for s in self.forward.outputs]
        for output, adjoint in self.adjoint_of.items():
            j = names.index(output)
            g = grads[j]
            # An output the loss does not use has no gradient: its adjoint is zero.
            by_name[adjoint] = torch.zeros_like(outs[j]) if g is None else g.contiguous()
        results = self.backward.op([by_name[s.name] for s in self.backward.inputs])
        gradient = {s.name: r for s, r in zip(self.backward.outputs, results)}
        return [gradient[self.gradient_of[s.name]].to(t.dtype) if s.name in self.gradient_of else None
                for s, t in zip(self.inputs, ins)]
