"""Every function of the Tensor API in one namespace (``em.exp``, ``em.cat``, ...), and the
vocabulary derivative rules are written in."""
from .creation import *  # noqa: F401,F403
from .creation import (empty, empty_like, from_numpy, full, full_like, ones, ones_like,  # noqa
                       random, random_like, seed, tensor, zeros, zeros_like)
from .elementwise import *  # noqa: F401,F403
from .reduce import *  # noqa: F401,F403
from .reduce import sum_to_shape  # noqa: F401
from .shape_ops import *  # noqa: F401,F403
from .indexing import *  # noqa: F401,F403
from .linalg import *  # noqa: F401,F403
from .nn_ops import *  # noqa: F401,F403
from .activation import *  # noqa: F401,F403
