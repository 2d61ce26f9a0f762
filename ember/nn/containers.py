"""`Identity` and `Sequential`."""
from __future__ import annotations

import ember as em
from ember.errors import ConfigError

__all__ = ["Identity", "Sequential"]


class Identity(em.Module):
    """Returns its input unchanged (a placeholder where a layer is optional)."""

    def __init__(self, *args, **kwargs):
        pass

    def forward(self, x):
        return x


class Sequential(em.Module):
    """Calls its layers in order, each on the previous one's output:
    ``nn.Sequential(nn.Linear(4, 8), nn.Relu(), nn.Linear(8, 2))``. Layers are modules (or
    plain callables, which hold no params); params are named ``layers.<i>.<name>``."""

    def __init__(self, *layers):
        if len(layers) == 1 and isinstance(layers[0], (list, tuple)):
            layers = tuple(layers[0])
        for i, layer in enumerate(layers):
            if not callable(layer):
                raise ConfigError(f"Sequential: layer {i} is a {type(layer).__name__}, which "
                                  f"is not callable; give modules or functions")
        self.layers = list(layers)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x

    def __len__(self):
        return len(self.layers)

    def __iter__(self):
        return iter(self.layers)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return Sequential(*self.layers[i])
        return self.layers[i]

    def extra_repr(self):
        return ""
