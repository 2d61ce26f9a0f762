"""ember: tensors on interchangeable backends, with autodiff (and, later, fusion) as
decorators. See README.md and DESIGN.md."""
from . import errors  # noqa: F401
from . import dtype as _dtype
from .dtype import (DType, float64, float32, float16, bfloat16, int64, int32, int16,  # noqa
                    int8, uint8, bool_, f64, f32, f16, bf16, i64, i32, i16, i8, u8)
from . import ops  # noqa: F401
from . import backend  # noqa: F401
from .backend.base import Device  # noqa: F401
from .backend.autodiff import Gradients, no_grad, enable_grad, is_grad_enabled  # noqa: F401
from .tensor import (Tensor, TensorData, Shape, Distribution, Default, Uniform,  # noqa: F401
                     Normal, Bernoulli, assert_approx_eq, device, default_device,
                     set_default_device)
from .tensor.functional import *  # noqa: F401,F403
from .tensor.interop import from_dlpack  # noqa: F401
from .module import Module, Param, config, GradientsParams  # noqa: F401
from . import optim  # noqa: F401
from . import fusion  # noqa: F401
from . import cuda  # noqa: F401  (imports no CuPy until asked)
from .backend.precision import set_matmul_precision, get_matmul_precision  # noqa: F401
from .heap import freeze_heap, set_auto_freeze_heap  # noqa: F401

bool = bool_  # noqa: A001  (em.bool as in torch.bool)

__version__ = "0.1.0"


def sync(device=None) -> None:
    """Wait for all queued work on ``device`` (the default device if None)."""
    from .tensor.device import as_device
    as_device(device).sync()
