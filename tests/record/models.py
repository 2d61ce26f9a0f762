"""Small modules shared by the record tests: hand-made with the Tensor API (so the tests do
not depend on ember.nn), named like PyTorch's layers so PyTorchAdapter recognizes them."""
import numpy as np

import ember as em


def P(arr, device, require_grad=True, dtype=None):
    return em.Param(em.tensor(np.asarray(arr), dtype=dtype, device=device),
                    require_grad=require_grad)


class Linear(em.Module):
    def __init__(self, d_in, d_out, *, device, rng):
        self.weight = P(rng.standard_normal((d_in, d_out)).astype(np.float32), device)
        self.bias = P(rng.standard_normal(d_out).astype(np.float32), device)

    def forward(self, x):
        return em.linear(x, self.weight, self.bias)


class Conv2d(em.Module):
    def __init__(self, c_in, c_out, k, *, device, rng, padding=1):
        self.weight = P(rng.standard_normal((c_out, c_in, k, k)).astype(np.float32), device)
        self.bias = P(rng.standard_normal(c_out).astype(np.float32), device)
        self.padding = padding

    def forward(self, x):
        return em.conv2d(x, self.weight, self.bias, padding=self.padding)


class BatchNorm2d(em.Module):
    def __init__(self, c, *, device, rng):
        self.weight = P(np.ones(c, np.float32), device)
        self.bias = P(np.zeros(c, np.float32), device)
        self.running_mean = P(np.zeros(c, np.float32), device, require_grad=False)
        self.running_var = P(np.ones(c, np.float32), device, require_grad=False)

    def forward(self, x):
        out, _, _ = em.batch_norm(x, self.running_mean, self.running_var, self.weight,
                                  self.bias, training=False, eps=1e-5)
        return out


class LayerNorm(em.Module):
    """Names its params gamma/beta (as some codebases do), so importing from PyTorch's
    weight/bias needs the adapter's renaming."""

    def __init__(self, d, *, device, rng):
        self.gamma = P(np.ones(d, np.float32), device)
        self.beta = P(np.zeros(d, np.float32), device)
        self.d = d

    def forward(self, x):
        return em.layer_norm(x, self.d, self.gamma, self.beta, eps=1e-5)


class Embedding(em.Module):
    def __init__(self, n, d, *, device, rng):
        self.weight = P(rng.standard_normal((n, d)).astype(np.float32), device)

    def forward(self, idx):
        return em.embedding(self.weight, idx)


class Net(em.Module):
    """indices [N, 6] -> embedding [N, 6, 6] -> conv -> batch norm -> relu -> linear ->
    layer norm [N, 8]."""

    def __init__(self, *, device=None, seed=0):
        rng = np.random.default_rng(seed)
        device = device or em.device("cpu")
        self.emb = Embedding(10, 6, device=device, rng=rng)
        self.conv = Conv2d(1, 4, 3, device=device, rng=rng)
        self.bn = BatchNorm2d(4, device=device, rng=rng)
        self.fc = Linear(4 * 6 * 6, 8, device=device, rng=rng)
        self.norm = LayerNorm(8, device=device, rng=rng)

    def forward(self, idx):
        x = self.emb(idx)
        n = x.shape[0]
        x = self.conv(x.reshape(n, 1, 6, 6))
        x = self.bn(x).relu()
        return self.norm(self.fc(x.reshape(n, 4 * 6 * 6)))


def torch_net(seed=0):
    """The PyTorch twin of `Net`, with non-trivial running statistics, in eval mode."""
    import torch
    torch.manual_seed(seed)

    class TNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(10, 6)
            self.conv = torch.nn.Conv2d(1, 4, 3, padding=1)
            self.bn = torch.nn.BatchNorm2d(4)
            self.fc = torch.nn.Linear(4 * 6 * 6, 8)
            self.norm = torch.nn.LayerNorm(8)

        def forward(self, idx):
            x = self.emb(idx)
            n = x.shape[0]
            x = torch.relu(self.bn(self.conv(x.reshape(n, 1, 6, 6))))
            return self.norm(self.fc(x.reshape(n, -1)))

    net = TNet()
    with torch.no_grad():
        net.norm.weight.uniform_(0.5, 1.5)
        net.norm.bias.uniform_(-0.5, 0.5)
        net.bn.weight.uniform_(0.5, 1.5)
        net.bn.bias.uniform_(-0.5, 0.5)
        net.train()
        for _ in range(3):   # move the running statistics off 0 / 1
            net(torch.randint(0, 10, (8, 6)))
    return net.eval()


class Mixed(em.Module):
    """Params of every kind a record must keep: f32, f64, f16, bf16, int and bool buffers,
    in a list and a dict."""

    def __init__(self, *, device=None, seed=0):
        rng = np.random.default_rng(seed)
        device = device or em.device("cpu")
        self.w32 = P(rng.standard_normal((3, 4)).astype(np.float32), device)
        self.w64 = P(rng.standard_normal((2, 2)), device)
        self.w16 = P(rng.standard_normal(5).astype(np.float16), device)
        self.wbf = P(rng.standard_normal((2, 3)), device, dtype=em.bf16)
        self.steps = P(np.array([7, -3, 2 ** 40], np.int64), device, require_grad=False)
        self.mask = P(np.array([True, False, True]), device, require_grad=False)
        self.blocks = [Linear(4, 4, device=device, rng=rng), Linear(4, 2, device=device,
                                                                      rng=rng)]
        self.heads = {"a": P(rng.standard_normal(2).astype(np.float32), device)}
        self.name = "mixed"

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x
