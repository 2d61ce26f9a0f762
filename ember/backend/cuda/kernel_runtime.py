"""The CUDA kernel runtime as Fusion(Cuda) sees it: generated kernels queued on the same
per-thread stream as the Cuda backend's own ops.

`ember.kernel.cuda.runtime` launches on CuPy's current stream; the Cuda backend makes its
stream current only around its ops. This wrapper enters the calling thread's stream scope
(on the device of the first CuPy input) around ``compile``, ``launch`` and ``launch_into``,
and orders the launch after the inputs' last use on another thread's stream, as ops are.
Anything else is the wrapped runtime's own.
"""
from __future__ import annotations


class ScopedKernelRuntime:
    def __init__(self, runtime, backend):
        self._rt = runtime
        self._backend = backend
        self._ndarray = backend.cp.ndarray
        self._get_device = backend.cp.cuda.runtime.getDevice

    def __getattr__(self, name):
        return getattr(self._rt, name)

    def _scope(self, arrays):
        for a in arrays:
            if isinstance(a, self._ndarray):
                return self._backend.scope(a.device.id)
        return self._backend.scope(self._get_device())

    def compile(self, *args, **kwargs):
        with self._backend.scope(self._get_device()):
            return self._rt.compile(*args, **kwargs)

    def launch(self, program, inputs, args=()):
        scope = self._scope(inputs)
        with scope:
            if scope.order.tracking:
                crossed = scope.order.before(scope, inputs)
                out = self._rt.launch(program, inputs, args)
                scope.order.after(scope, tuple(out), crossed)
                return out
            return self._rt.launch(program, inputs, args)

    def launch_into(self, program, inputs, args, outputs):
        scope = self._scope(inputs)
        with scope:
            if scope.order.tracking:
                crossed = scope.order.before(scope, list(inputs) + list(outputs))
                self._rt.launch_into(program, inputs, args, outputs)
                scope.order.after(scope, tuple(outputs), crossed)
                return None
            return self._rt.launch_into(program, inputs, args, outputs)
