"""Parameter groups: their own lr multiplier and hyperparameters, chosen by glob, regex,
predicate or explicit params; checked against torch.optim param groups."""
import re

import numpy as np
import pytest

from ember import optim
from ember.errors import ConfigError

from ._util import Net, grads_for, max_diff, named, problem, run_ember, run_torch

torch = pytest.importorskip("torch")


def test_groups_match_torch_param_groups():
    w0, coefs, lrs = problem(seed=11, steps=5)
    model = Net(w0)
    opt = optim.Adam(weight_decay=0.1, groups=[
        optim.ParamGroup("a.*", lr_mult=0.1, weight_decay=0.0),
        optim.ParamGroup(params=[model.b.weight], betas=(0.5, 0.9), amsgrad=True),
    ])
    out = run_ember(opt, w0, coefs, lrs, model=model)

    def make(ps):
        return torch.optim.Adam([
            {"params": ps[:2], "lr_mult": 0.1, "weight_decay": 0.0},
            {"params": ps[2:], "betas": (0.5, 0.9), "amsgrad": True},
        ], weight_decay=0.1)
    ref = run_torch(make, w0, coefs, lrs)
    assert max_diff(out, ref) < 1e-10


def test_sgd_groups_no_decay_on_bias():
    w0, coefs, lrs = problem(seed=12, steps=4)
    opt = optim.SGD(momentum=0.9, weight_decay=0.05,
                    groups=optim.ParamGroup("*.bias", weight_decay=0.0, lr_mult=2.0))
    out = run_ember(opt, w0, coefs, lrs)

    def make(ps):
        return torch.optim.SGD([{"params": [ps[0], ps[2]]},
                                {"params": [ps[1]], "weight_decay": 0.0, "lr_mult": 2.0}],
                               lr=0.1, momentum=0.9, weight_decay=0.05)
    ref = run_torch(make, w0, coefs, lrs)
    assert max_diff(out, ref) < 1e-10


def test_first_matching_group_wins_and_selectors():
    w0, coefs, _ = problem(seed=13, steps=1)
    model = Net(w0)
    g = grads_for(model, coefs[0], np.float64)
    # lr_mult=0 freezes in effect; order decides which group a param belongs to
    opt = optim.SGD(groups=[optim.ParamGroup(re.compile(r"^a\.w"), lr_mult=0.0),
                            optim.ParamGroup("a.*", lr_mult=1.0),
                            optim.ParamGroup(lambda path: path.startswith("b."), lr_mult=0.0)])
    out = opt.step(0.1, model, g)
    np.testing.assert_array_equal(out.a.weight.numpy(), model.a.weight.numpy())
    np.testing.assert_array_equal(out.b.weight.numpy(), model.b.weight.numpy())
    np.testing.assert_allclose(out.a.bias.numpy(),
                               model.a.bias.numpy() - 0.1 * g.get(model.a.bias).numpy())
    # explicit params by id, and a list of globs
    opt2 = optim.SGD(groups=[optim.ParamGroup(["nothing.*", "b.*"], lr_mult=0.0),
                             optim.ParamGroup(params=[model.a.weight.id], lr_mult=0.0)])
    out2 = opt2.step(0.1, model, g)
    for k in ("a.weight", "b.kernel"):
        np.testing.assert_array_equal(named(out2)[k].numpy(), named(model)[k].numpy())
    assert not np.array_equal(out2.a.bias.numpy(), model.a.bias.numpy())


def test_group_errors():
    w0, coefs, _ = problem(seed=14, steps=1)
    model = Net(w0)
    g = grads_for(model, coefs[0], np.float64)
    with pytest.raises(ConfigError, match="unknown hyperparameter.*momentum"):
        optim.Adam(groups=[optim.ParamGroup("a.*", momentum=0.9)])
    with pytest.raises(ConfigError, match="beta1"):
        optim.Adam(groups=[optim.ParamGroup("a.*", betas=(2.0, 0.9))])
    with pytest.raises(ConfigError, match="pattern"):
        optim.ParamGroup()
    with pytest.raises(ConfigError, match="lr_mult"):
        optim.ParamGroup("a.*", lr_mult=-1)
    opt = optim.SGD(groups=[optim.ParamGroup("decoder.*", lr_mult=0.5)])
    with pytest.raises(ConfigError, match=r"decoder\.\*.*a\.weight"):
        opt.step(0.1, model, g)
    assert len(opt) == 0  # a failed step changes no state
    # a group whose params are frozen for now is fine (they may be unfrozen later)
    frozen = model.freeze("b.*")
    opt = optim.SGD(groups=[optim.ParamGroup("b.*", lr_mult=0.5)])
    out = opt.step(0.1, frozen, g)
    np.testing.assert_array_equal(out.b.weight.numpy(), model.b.weight.numpy())
    out = opt.step(0.1, out.unfreeze("b.*"), g)
    np.testing.assert_allclose(out.b.weight.numpy(), model.b.weight.numpy() -
                               0.05 * g.get(model.b.weight).numpy(), rtol=1e-12)
