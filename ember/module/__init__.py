"""Modules, params, configs and per-param gradients (DESIGN §6). Built only on the Tensor
API, so it runs unchanged on every backend."""
from .param import Param, new_param_id  # noqa: F401
from .module import Module  # noqa: F401
from .config import config, is_config  # noqa: F401
from .gradients_params import GradientsParams  # noqa: F401

__all__ = ["Module", "Param", "config", "is_config", "GradientsParams", "new_param_id"]
