"""@em.config: dataclasses with JSON round trips, nested configs, errors naming keys,
atomic saves and init(device)."""
import dataclasses
import json
import os

import numpy as np
import pytest

import ember as em
from ember.errors import ConfigError


@em.config
class ActConfig:
    kind: str = "gelu"
    slope: float = 0.01


@em.config
class LinearConfig:
    d_in: int
    d_out: int
    bias: bool = True

    def init(self, device):
        return Lin(self, device)


class Lin(em.Module):
    def __init__(self, cfg, device):
        self.cfg = cfg
        self.weight = em.Param(em.ones((cfg.d_in, cfg.d_out), device=device))
        self.bias = em.Param(em.zeros((cfg.d_out,), device=device)) if cfg.bias else None

    def forward(self, x):
        y = x @ self.weight
        return y if self.bias is None else y + self.bias


@em.config
class MlpConfig:
    layers: LinearConfig
    act: ActConfig = dataclasses.field(default_factory=ActConfig)
    hidden: tuple[int, ...] = (8, 8)
    blocks: list[LinearConfig] = dataclasses.field(default_factory=list)
    dropout: float = 0.1
    name: str | None = None


def test_is_a_dataclass_with_defaults():
    cfg = LinearConfig(4, 2)
    assert dataclasses.is_dataclass(cfg) and cfg.bias is True
    assert cfg == LinearConfig(d_in=4, d_out=2, bias=True)
    cfg.d_out = 3  # plain (not frozen) dataclass
    assert cfg.d_out == 3
    assert em.module.is_config(cfg) and not em.module.is_config(object())


def test_round_trip_nested(tmp_path):
    cfg = MlpConfig(LinearConfig(4, 2, bias=False), ActConfig("relu", 0.2), (16, 4),
                    [LinearConfig(1, 2), LinearConfig(3, 4)], 0.0, "m")
    d = cfg.to_dict()
    assert d == {"layers": {"d_in": 4, "d_out": 2, "bias": False},
                 "act": {"kind": "relu", "slope": 0.2}, "hidden": [16, 4],
                 "blocks": [{"d_in": 1, "d_out": 2, "bias": True},
                            {"d_in": 3, "d_out": 4, "bias": True}],
                 "dropout": 0.0, "name": "m"}
    path = tmp_path / "sub" / "mlp.json"
    cfg.save(path)
    assert json.loads(path.read_text()) == d
    back = MlpConfig.load(path)
    assert back == cfg
    assert isinstance(back.layers, LinearConfig) and isinstance(back.act, ActConfig)
    assert back.hidden == (16, 4) and isinstance(back.blocks[1], LinearConfig)
    assert MlpConfig.from_dict(d) == cfg
    assert MlpConfig.from_json(cfg.to_json()) == cfg
    # defaults fill what the file leaves out
    assert MlpConfig.from_dict({"layers": {"d_in": 1, "d_out": 1}}) == \
        MlpConfig(LinearConfig(1, 1))
    # no temp files left behind
    assert os.listdir(path.parent) == ["mlp.json"]


def test_unknown_and_missing_keys():
    with pytest.raises(ConfigError) as e:
        LinearConfig.from_dict({"d_in": 1, "d_outt": 2, "extra": 3})
    msg = str(e.value)
    assert "d_outt" in msg and "extra" in msg and "d_out" in msg  # missing and valid keys
    assert "unknown" in msg and "missing" in msg and "bias" in msg
    with pytest.raises(ConfigError, match=r"MlpConfig\.layers.*missing keys \['d_out'\]"):
        MlpConfig.from_dict({"layers": {"d_in": 1}})
    with pytest.raises(ConfigError, match="expected an object"):
        MlpConfig.from_dict({"layers": 3})
    assert issubclass(ConfigError, ValueError)


def test_load_errors(tmp_path):
    with pytest.raises(ConfigError, match="no file"):
        LinearConfig.load(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        LinearConfig.load(bad)


def test_save_is_atomic_over_existing_file(tmp_path, monkeypatch):
    path = tmp_path / "c.json"
    LinearConfig(1, 2).save(path)
    # a failure while writing leaves the old file intact and no temp file behind
    real = os.replace

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        LinearConfig(5, 6).save(path)
    monkeypatch.setattr(os, "replace", real)
    assert LinearConfig.load(path) == LinearConfig(1, 2)
    assert os.listdir(tmp_path) == ["c.json"]


def test_init_builds_module_and_config_is_a_constant():
    dev = em.device("cpu")
    m = LinearConfig(3, 2).init(dev)
    assert isinstance(m, em.Module) and [p for p, _ in m.named_parameters()] == \
        ["weight", "bias"]
    out = m(em.ones((1, 3), device=dev))
    np.testing.assert_allclose(out.numpy(), [[3.0, 3.0]])
    m2 = m.to_device(dev.autodiff())
    assert m2.cfg is m.cfg  # configs are constants carried along
    nb = LinearConfig(3, 2, bias=False).init(dev)
    assert [p for p, _ in nb.named_parameters()] == ["weight"]


def test_config_instance_as_default():
    @em.config
    class Outer:
        act: ActConfig = ActConfig("relu")

    a, b = Outer(), Outer()
    assert a.act == ActConfig("relu") and a.act is not b.act
    assert Outer.from_dict({}).act.kind == "relu"
    assert Outer.from_dict({"act": {"slope": 0.5}}).act == ActConfig("gelu", 0.5)


def test_decorator_with_options():
    @em.config(frozen=True)
    class F:
        a: int = 1

    f = F()
    with pytest.raises(dataclasses.FrozenInstanceError):
        f.a = 2
    assert F.from_dict({"a": 3}).a == 3


def test_a_value_type_with_its_own_json_form_is_a_config_field():
    """Fields typed as a value class with ``to_dict``/``from_dict`` (nn.Initializer) round-trip,
    whether typed as the base class or a concrete one."""
    from ember import nn
    from ember.nn import initializer as I

    @em.config
    class LayerCfg:
        weight_init: nn.Initializer
        bias_init: I.KaimingUniform = None

    cfg = LayerCfg(I.Normal(0.0, 0.5), I.KaimingUniform(gain=2.0))
    back = LayerCfg.from_json(cfg.to_json())
    assert back == cfg
    assert type(back.weight_init) is I.Normal and back.weight_init.std == 0.5
