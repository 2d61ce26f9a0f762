"""`ember.nn`: layers, activations, losses and initializers, built only on the Tensor API
(so they run unchanged on every backend). Each layer is an `em.Module` with a direct
constructor (``nn.Linear(4, 2, device=dev)``) and a config (``nn.LinearConfig(4, 2)
.init(dev)``); functions live in `ember.nn.functional`, initializers in `ember.nn.init`."""
from . import functional  # noqa: F401
from . import initializer as init  # noqa: F401
from .initializer import Initializer  # noqa: F401
from .activation import *  # noqa: F401,F403
from .attention import *  # noqa: F401,F403
from .containers import *  # noqa: F401,F403
from .conv import *  # noqa: F401,F403
from .dropout import Dropout, DropoutConfig  # noqa: F401
from .embedding import *  # noqa: F401,F403
from .linear import *  # noqa: F401,F403
from .loss import (CrossEntropyLoss, NllLoss, BinaryCrossEntropyLoss, MseLoss,  # noqa: F401
                   L1Loss, HuberLoss, SmoothL1Loss, KlDivLoss, CosineEmbeddingLoss,
                   CrossEntropyLossConfig, BinaryCrossEntropyLossConfig, MseLossConfig,
                   L1LossConfig, HuberLossConfig, SmoothL1LossConfig, KlDivLossConfig,
                   CosineEmbeddingLossConfig)
from .norm import (BatchNorm, LayerNorm, GroupNorm, InstanceNorm, RmsNorm,  # noqa: F401
                   BatchNormConfig, LayerNormConfig, GroupNormConfig, InstanceNormConfig,
                   RmsNormConfig)
from .pool import *  # noqa: F401,F403
from .positional import (PositionalEncoding, RotaryEncoding,  # noqa: F401
                         PositionalEncodingConfig, RotaryEncodingConfig)
from .rnn import *  # noqa: F401,F403
from .transformer import *  # noqa: F401,F403
