"""Optimizers, learning-rate schedulers, gradient clipping and accumulation. Training is
functional, as in Burn: ``model = opt.step(lr, model, grads)`` returns the updated module.
Built on the public Tensor API only."""
from .base import Optimizer  # noqa: F401
from .groups import ParamGroup  # noqa: F401
from .sgd import SGD, Sgd, SgdConfig  # noqa: F401
from .adam import Adam, AdamW, AdamConfig, AdamWConfig  # noqa: F401
from .rmsprop import RmsProp, RMSprop, RmsPropConfig  # noqa: F401
from .adagrad import AdaGrad, Adagrad, AdaGradConfig  # noqa: F401
from .clipping import (ClipByValue, ClipByNorm, clip_grad_value, clip_grad_norm,  # noqa: F401
                       grad_norm)
from .accumulation import GradientsAccumulator  # noqa: F401
from .scheduler import (LrScheduler, ConstantLr, LinearLr, ExponentialLr, StepLr,  # noqa: F401
                        MultiStepLr, CosineAnnealingLr, NoamLr, LambdaLr, SequentialLr,
                        ConstantLrConfig, LinearLrConfig, ExponentialLrConfig, StepLrConfig,
                        CosineAnnealingLrConfig, NoamLrConfig)
