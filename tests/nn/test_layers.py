"""Layer forwards against torch.nn with the same weights copied in."""
from __future__ import annotations

import copy

import numpy as np
import pytest

import ember as em
from ember import nn
from ember.errors import ConfigError, ShapeError

from ._ref import AD, CPU, close, et, linear_from, load, randn, torch, tt

tnn = torch.nn


def test_linear_matches_torch_and_keeps_burn_layout():
    ref = tnn.Linear(5, 3)
    m = nn.Linear(5, 3)
    assert tuple(m.weight.shape) == (5, 3) and tuple(m.bias.shape) == (3,)
    m = load(m, linear_from("", ref))
    x = randn(4, 2, 5)
    close(m(et(x)), ref(tt(x)))
    nb = nn.Linear(5, 3, bias=False)
    assert nb.bias is None and [p for p, _ in nb.named_parameters()] == ["weight"]


def test_linear_config_builds_and_round_trips(tmp_path):
    cfg = nn.LinearConfig(4, 2, bias=False, initializer=nn.init.XavierNormal(2.0))
    m = cfg.init(AD)
    assert m.bias is None and m.weight.device is AD and m.weight.is_require_grad()
    cfg.save(tmp_path / "lin.json")
    back = nn.LinearConfig.load(tmp_path / "lin.json")
    assert back == cfg and isinstance(back.initializer, nn.init.XavierNormal)
    with pytest.raises(ConfigError, match="unknown keys"):
        nn.LinearConfig.from_dict({"d_input": 1, "d_output": 2, "nope": 3})
    c2 = nn.Conv2dConfig.from_json(nn.Conv2dConfig(3, 4, (3, 2), stride=2).to_json())
    assert c2.kernel_size == (3, 2) and c2 == nn.Conv2dConfig(3, 4, (3, 2), stride=2)
    assert nn.TransformerEncoderConfig(8, 16, 2, 1).init().layers[0].mha.n_heads == 2


def test_bad_options_raise_config_errors():
    with pytest.raises(ConfigError, match="d_output"):
        nn.Linear(3, 0)
    with pytest.raises(ConfigError, match="groups"):
        nn.Conv2d(3, 4, 3, groups=2)
    with pytest.raises(ConfigError, match="n_heads"):
        nn.MultiHeadAttention(10, 3)
    with pytest.raises(ConfigError, match="initializer"):
        nn.Linear(2, 2, initializer="kaiming")


@pytest.mark.parametrize("kw", [dict(), dict(stride=2, padding=1), dict(padding="same"),
                                dict(dilation=2, groups=2, bias=False)])
def test_conv1d(kw):
    ref = tnn.Conv1d(4, 6, 3, **kw)
    m = nn.Conv1d(4, 6, 3, **kw)
    m = load(m, {"weight": ref.weight, **({"bias": ref.bias} if ref.bias is not None else {})})
    x = randn(2, 4, 11)
    close(m(et(x)), ref(tt(x)))


@pytest.mark.parametrize("kw", [dict(), dict(stride=(2, 1), padding=(1, 2)),
                                dict(padding="same", dilation=(1, 2)),
                                dict(groups=2, bias=False)])
def test_conv2d(kw):
    ref = tnn.Conv2d(4, 6, (3, 2) if kw.get("padding") != "same" else 3, **kw)
    m = nn.Conv2d(4, 6, tuple(ref.kernel_size), **kw)
    m = load(m, {"weight": ref.weight, **({"bias": ref.bias} if ref.bias is not None else {})})
    x = randn(2, 4, 7, 8)
    close(m(et(x)), ref(tt(x)))


@pytest.mark.parametrize("kw", [dict(), dict(stride=2, padding=1, output_padding=1),
                                dict(groups=2, dilation=2, bias=False)])
def test_conv_transpose(kw):
    for nd, tcls, ecls, xs in ((1, tnn.ConvTranspose1d, nn.ConvTranspose1d, (2, 4, 6)),
                               (2, tnn.ConvTranspose2d, nn.ConvTranspose2d, (2, 4, 5, 4))):
        ref = tcls(4, 6, 3, **kw)
        m = ecls(4, 6, 3, **kw)
        assert tuple(m.weight.shape) == tuple(ref.weight.shape)
        m = load(m, {"weight": ref.weight,
                     **({"bias": ref.bias} if ref.bias is not None else {})})
        x = randn(*xs)
        close(m(et(x)), ref(tt(x)))


def test_default_inits_have_torch_bounds():
    m = nn.Conv2d(8, 16, 3, groups=2)
    bound = 1 / np.sqrt(4 * 9)
    w = m.weight.numpy()
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.8 * bound
    lin = nn.Linear(50, 40)
    assert np.abs(lin.weight.numpy()).max() <= 1 / np.sqrt(50)
    assert np.abs(lin.bias.numpy()).max() <= 1 / np.sqrt(50)


def test_pools():
    x = randn(2, 3, 9, 8)
    x1 = randn(2, 3, 11)
    cases = [
        (nn.MaxPool2d(3, 2, 1), tnn.MaxPool2d(3, 2, 1), x),
        (nn.MaxPool2d(2, dilation=2, ceil_mode=True), tnn.MaxPool2d(2, dilation=2,
                                                                     ceil_mode=True), x),
        (nn.AvgPool2d(3, 2, 1, count_include_pad=False),
         tnn.AvgPool2d(3, 2, 1, count_include_pad=False), x),
        (nn.AdaptiveAvgPool2d((4, None)), tnn.AdaptiveAvgPool2d((4, None)), x),
        (nn.MaxPool1d(3), tnn.MaxPool1d(3), x1),
        (nn.AvgPool1d(4, 3, 2), tnn.AvgPool1d(4, 3, 2), x1),
        (nn.AdaptiveAvgPool1d(4), tnn.AdaptiveAvgPool1d(4), x1),
    ]
    for m, ref, inp in cases:
        close(m(et(inp)), ref(tt(inp)))
    assert nn.MaxPool2dConfig(2).init().kernel_size == (2, 2)


def test_batch_norm_training_updates_running_stats_then_eval_uses_them():
    ref = tnn.BatchNorm2d(3, momentum=0.2)
    m = nn.BatchNorm(3, momentum=0.2)
    with torch.no_grad():
        ref.weight.copy_(torch.tensor([1.5, 0.5, 2.0]))
        ref.bias.copy_(torch.tensor([0.1, -0.2, 0.3]))
    m = load(m, {"weight": ref.weight, "bias": ref.bias, "running_mean": ref.running_mean,
                 "running_var": ref.running_var})
    ids = (m.running_mean.id, m.running_var.id)
    before = copy.deepcopy(m)
    for _ in range(2):
        x = randn(4, 3, 5, 5) * 2 + 1
        close(m(et(x)), ref(tt(x)))
    close(m.running_mean, ref.running_mean)
    close(m.running_var, ref.running_var)
    assert (m.running_mean.id, m.running_var.id) == ids
    assert not m.running_mean.require_grad_flag
    assert np.all(before.running_mean.numpy() == 0)  # copies keep their own stats
    ev = m.eval()
    ref.eval()
    x = randn(4, 3, 5, 5)
    close(ev(et(x)), ref(tt(x)))
    close(ev.running_mean, m.running_mean)  # eval does not move them
    # 1-d inputs [N, C] and [N, C, L] use the same class
    ref1 = tnn.BatchNorm1d(3)
    m1 = nn.BatchNorm(3)
    for shape in ((6, 3), (4, 3, 7)):
        x = randn(*shape)
        close(m1(et(x)), ref1(tt(x)))
    close(m1.running_var, ref1.running_var)


def test_batch_norm_on_autodiff_device_detaches_stats():
    m = nn.BatchNorm(2, device=AD)
    x = em.tensor(randn(5, 2), device=AD).require_grad()
    out = m(x)
    grads = (out * out).sum().backward()
    assert x.grad(grads) is not None and m.weight.grad(grads) is not None
    assert not m.running_mean.is_require_grad()
    assert m.running_mean.grad(grads) is None


def test_layer_group_instance_rms_norm():
    x = randn(3, 4, 6)
    ln = tnn.LayerNorm(6)
    gn = tnn.GroupNorm(2, 4)
    inn = tnn.InstanceNorm1d(4, affine=True)
    rms = tnn.RMSNorm(6, eps=1e-5)
    with torch.no_grad():
        for p in (ln.weight, ln.bias, gn.weight, gn.bias, inn.weight, inn.bias, rms.weight):
            p.copy_(torch.randn(p.shape))
    cases = [
        (load(nn.LayerNorm(6), {"weight": ln.weight, "bias": ln.bias}), ln),
        (load(nn.GroupNorm(2, 4), {"weight": gn.weight, "bias": gn.bias}), gn),
        (load(nn.InstanceNorm(4), {"weight": inn.weight, "bias": inn.bias}), inn),
        (load(nn.RmsNorm(6), {"weight": rms.weight}), rms),
    ]
    for m, ref in cases:
        close(m(et(x)), ref(tt(x)))
    ln2 = tnn.LayerNorm((4, 6), elementwise_affine=False)
    close(nn.LayerNorm((4, 6), elementwise_affine=False)(et(x)), ln2(tt(x)))
    assert nn.LayerNorm(6, bias=False).bias is None


def test_embedding():
    ref = tnn.Embedding(10, 4)
    m = load(nn.Embedding(10, 4), {"weight": ref.weight})
    idx = np.array([[1, 2, 9], [0, 0, 3]])
    close(m(em.tensor(idx)), ref(torch.from_numpy(idx)))
    w = nn.Embedding(200, 50).weight.numpy()
    assert abs(w.mean()) < 0.02 and abs(w.std() - 1) < 0.02


@pytest.mark.parametrize("mod,ref", [
    (nn.Relu(), tnn.ReLU()), (nn.Gelu(), tnn.GELU()), (nn.Gelu("tanh"), tnn.GELU("tanh")),
    (nn.Silu(), tnn.SiLU()), (nn.Sigmoid(), tnn.Sigmoid()), (nn.Tanh(), tnn.Tanh()),
    (nn.LeakyRelu(0.2), tnn.LeakyReLU(0.2)), (nn.Elu(0.7), tnn.ELU(0.7)),
    (nn.Selu(), tnn.SELU()), (nn.Celu(1.3), tnn.CELU(1.3)),
    (nn.Softplus(2.0, 5.0), tnn.Softplus(2.0, 5.0)), (nn.Mish(), tnn.Mish()),
    (nn.HardSigmoid(1 / 6, 0.5), tnn.Hardsigmoid()), (nn.HardSwish(), tnn.Hardswish()),
    (nn.LogSigmoid(), tnn.LogSigmoid()), (nn.Softmax(1), tnn.Softmax(1)),
    (nn.LogSoftmax(-1), tnn.LogSoftmax(-1)), (nn.Softmin(1), tnn.Softmin(1)),
    (nn.Glu(1), tnn.GLU(1)),
], ids=lambda v: type(v).__name__)
def test_activation_modules(mod, ref):
    x = randn(3, 4, 5) * 3
    close(mod(et(x)), ref(tt(x)))


def test_prelu_is_learned_per_channel():
    ref = tnn.PReLU(4, init=0.1)
    m = nn.Prelu(4, alpha=0.1, device=AD)
    assert [p for p, _ in m.named_parameters()] == ["weight"]
    x = randn(2, 4, 3)
    xt = tt(x)
    out = ref(xt)
    (out * out).sum().backward()
    y = m(em.tensor(x, device=AD))
    grads = (y * y).sum().backward()
    close(y, out)
    close(m.weight.grad(grads), ref.weight.grad)


def test_identity_and_sequential():
    seq = nn.Sequential(nn.Linear(4, 8), nn.Relu(), nn.Identity(), nn.Linear(8, 2))
    assert len(seq) == 4 and isinstance(seq[1], nn.Relu)
    assert [p for p, _ in seq.named_parameters()] == [
        "layers.0.weight", "layers.0.bias", "layers.3.weight", "layers.3.bias"]
    ref = tnn.Sequential(tnn.Linear(4, 8), tnn.ReLU(), tnn.Identity(), tnn.Linear(8, 2))
    seq = load(seq, {**linear_from("layers.0.", ref[0]), **linear_from("layers.3.", ref[3])})
    x = randn(5, 4)
    close(seq(et(x)), ref(tt(x)))
    close(seq[:2](et(x)), ref[:2](tt(x)))
    with pytest.raises(ConfigError):
        nn.Sequential(nn.Linear(2, 2), 3)


def test_swiglu_shapes():
    m = nn.SwiGlu(4, 6)
    x = em.tensor(randn(2, 4))
    out = m(x)
    ref = em.silu(x @ m.linear_inner.weight) * (x @ m.linear_outer.weight)
    close(out, ref)


def test_positional_encoding():
    pe = nn.PositionalEncoding(6, max_sequence_size=20)
    assert pe.num_params() == 0 and pe.state_dict() == {}
    x = randn(2, 5, 6)
    pos = np.arange(5)[:, None]
    i = np.arange(0, 6, 2)[None, :]
    ang = pos / 10000 ** (i / 6)
    table = np.zeros((5, 6))
    table[:, 0::2], table[:, 1::2] = np.sin(ang), np.cos(ang)
    close(pe(et(x)), x + table)
    close(pe(et(x[:, :2]), start=3), x[:, :2] + table[3:5])
    with pytest.raises(ShapeError):
        pe(em.zeros(1, 21, 6))


def test_rotary_encoding_against_complex_reference():
    d, n = 8, 6
    rope = nn.RotaryEncoding(d, max_sequence_length=16, theta=100.0)
    x = randn(2, 3, n, d).astype(np.float64)
    z = x[..., 0::2] + 1j * x[..., 1::2]
    freq = 100.0 ** (-np.arange(0, d, 2) / d)
    rot = z * np.exp(1j * np.arange(n)[:, None] * freq[None, :])
    want = np.stack([rot.real, rot.imag], -1).reshape(x.shape)
    close(rope(et(x.astype(np.float32))), want)
    # positions offset by start, and norms preserved
    got = rope(et(x[:, :, 2:4].astype(np.float32)), start=2)
    close(got, want[:, :, 2:4])
    # relative property: <rope(q)_m, rope(k)_n> depends on m - n only
    q, k = randn(1, 1, 1, d), randn(1, 1, 1, d)
    qs = np.concatenate([q] * 10, 2)
    ks = np.concatenate([k] * 10, 2)
    rq, rk = rope(et(qs)).numpy()[0, 0], rope(et(ks)).numpy()[0, 0]
    assert np.isclose(rq[5] @ rk[3], rq[7] @ rk[5], atol=1e-4)


def test_modules_run_on_autodiff_and_move_devices():
    m = nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.BatchNorm(2), nn.Relu(),
                      nn.MaxPool2d(2), nn.Dropout(0.2))
    ad = m.to_device(AD)
    x = em.tensor(randn(2, 1, 4, 4), device=AD)
    grads = ad(x).sum().backward()
    assert ad.layers[0].weight.grad(grads) is not None
    v = ad.valid()
    assert v.layers[0].weight.device is CPU and not v.layers[4].training
    out = v(em.tensor(randn(2, 1, 4, 4)))
    assert tuple(out.shape) == (2, 2, 2, 2)


def test_modules_and_configs_pickle_and_deepcopy():
    import pickle
    cfg = nn.TransformerEncoderConfig(8, 16, 2, 1, initializer=nn.init.KaimingNormal())
    assert pickle.loads(pickle.dumps(cfg)) == cfg
    m = cfg.init()
    x = em.tensor(randn(1, 3, 8))
    ev = m.eval()
    for other in (pickle.loads(pickle.dumps(ev)), copy.deepcopy(ev)):
        close(other(x), ev(x))
        assert [p.id for p in other.parameters()] == [p.id for p in ev.parameters()]
    rope = copy.deepcopy(nn.RotaryEncoding(8, 16))
    assert tuple(rope(x).shape) == (1, 3, 8)


def test_every_config_round_trips_through_json():
    samples = {
        "LinearConfig": (3, 2), "Conv1dConfig": (2, 4, 3), "Conv2dConfig": (2, 4, (3, 1)),
        "ConvTranspose1dConfig": (2, 4, 3), "ConvTranspose2dConfig": (2, 4, 3),
        "MaxPool1dConfig": (2,), "MaxPool2dConfig": (2,), "AvgPool1dConfig": (2,),
        "AvgPool2dConfig": (2,), "AdaptiveAvgPool1dConfig": (3,),
        "AdaptiveAvgPool2dConfig": ((3, 2),), "BatchNormConfig": (3,),
        "LayerNormConfig": (4,), "GroupNormConfig": (2, 4), "InstanceNormConfig": (3,),
        "RmsNormConfig": (4,), "DropoutConfig": (0.2,), "EmbeddingConfig": (5, 3),
        "MultiHeadAttentionConfig": (8, 2), "PositionWiseFeedForwardConfig": (4, 8),
        "TransformerEncoderConfig": (8, 16, 2, 1), "TransformerDecoderConfig": (8, 16, 2, 1),
        "PositionalEncodingConfig": (4,), "RotaryEncodingConfig": (4,),
        "LstmConfig": (3, 4), "GruConfig": (3, 4), "PreluConfig": (), "SwiGluConfig": (3, 4),
        "CrossEntropyLossConfig": (), "BinaryCrossEntropyLossConfig": (),
        "HuberLossConfig": (), "KlDivLossConfig": (),
    }
    configs = [n for n in dir(nn) if n.endswith("Config")]
    for name in configs:
        cls = getattr(nn, name)
        cfg = cls(*samples.get(name, ()))
        back = cls.from_json(cfg.to_json())
        assert back == cfg, name
        assert isinstance(back.init(), em.Module), name
