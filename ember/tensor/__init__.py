"""The user API: `Tensor`, `TensorData`, `Shape`, `Distribution`, and the functional ops."""
from .tensor import Tensor  # noqa: F401
from .data import TensorData, assert_approx_eq  # noqa: F401
from .shape import Shape  # noqa: F401
from .distribution import Distribution, Default, Uniform, Normal, Bernoulli  # noqa: F401
from .device import device, default_device, set_default_device  # noqa: F401
