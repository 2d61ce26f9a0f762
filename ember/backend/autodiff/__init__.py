"""The Autodiff decorator: records each op's backward step on top of any backend."""
from .backend import Autodiff  # noqa: F401
from .grad_mode import no_grad, enable_grad, is_grad_enabled  # noqa: F401
from .gradients import Gradients  # noqa: F401
from .graph import live_nodes  # noqa: F401
