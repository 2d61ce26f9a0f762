"""Functions of `ember.nn`, like ``torch.nn.functional``: the Tensor API's activations and
module ops re-exported, plus dropout, attention, the norms that are not in the Tensor API
and the losses."""
from __future__ import annotations

import ember as em

from .attention import quiet_softmax, scaled_dot_product_attention  # noqa: F401
from .dropout import dropout  # noqa: F401
from .loss import (binary_cross_entropy, binary_cross_entropy_with_logits,  # noqa: F401
                   cosine_embedding_loss, cross_entropy, huber_loss, kl_div, l1_loss,
                   mse_loss, nll_loss, smooth_l1_loss)
from .norm import instance_norm, rms_norm  # noqa: F401

# activations
sigmoid = em.sigmoid
tanh = em.tanh
relu = em.relu
leaky_relu = em.leaky_relu
prelu = em.prelu
gelu = em.gelu
silu = em.silu
log_sigmoid = em.log_sigmoid
hard_sigmoid = em.hard_sigmoid
softplus = em.softplus
mish = em.mish
elu = em.elu
selu = em.selu
celu = em.celu
softmax = em.softmax
log_softmax = em.log_softmax
softmin = em.softmin
glu = em.glu


def hard_swish(x):
    """``x * clamp(x / 6 + 1/2, 0, 1)`` (PyTorch's hardswish)."""
    return x * em.hard_sigmoid(x, 1.0 / 6.0, 0.5)


def relu6(x):
    """``clamp(x, 0, 6)``."""
    return x.clamp(0.0, 6.0)


# module ops
linear = em.linear
conv1d = em.conv1d
conv2d = em.conv2d
conv_transpose1d = em.conv_transpose1d
conv_transpose2d = em.conv_transpose2d
max_pool1d = em.max_pool1d
max_pool2d = em.max_pool2d
avg_pool1d = em.avg_pool1d
avg_pool2d = em.avg_pool2d
adaptive_avg_pool1d = em.adaptive_avg_pool1d
adaptive_avg_pool2d = em.adaptive_avg_pool2d
interpolate = em.interpolate
embedding = em.embedding
one_hot = em.one_hot
layer_norm = em.layer_norm
group_norm = em.group_norm
batch_norm = em.batch_norm

__all__ = [
    "sigmoid", "tanh", "relu", "leaky_relu", "prelu", "gelu", "silu", "log_sigmoid",
    "hard_sigmoid", "hard_swish", "relu6", "softplus", "mish", "elu", "selu", "celu",
    "softmax", "log_softmax", "softmin", "glu", "quiet_softmax",
    "linear", "conv1d", "conv2d", "conv_transpose1d", "conv_transpose2d", "max_pool1d",
    "max_pool2d", "avg_pool1d", "avg_pool2d", "adaptive_avg_pool1d", "adaptive_avg_pool2d",
    "interpolate", "embedding", "one_hot", "layer_norm", "group_norm", "batch_norm",
    "instance_norm", "rms_norm", "dropout", "scaled_dot_product_attention",
    "cross_entropy", "nll_loss", "binary_cross_entropy", "binary_cross_entropy_with_logits",
    "mse_loss", "l1_loss", "huber_loss", "smooth_l1_loss", "kl_div", "cosine_embedding_loss",
]
