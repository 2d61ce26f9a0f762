"""Fit y = 3x - 2 (plus noise) with autodiff and hand-written SGD: the smallest complete
training loop in ember.

    python examples/linear_regression.py
"""
import numpy as np

import ember as em

cpu = em.device("cpu")
ad = cpu.autodiff()

rng = np.random.default_rng(0)
x_np = rng.uniform(-1, 1, (256, 1)).astype(np.float32)
y_np = (3 * x_np - 2 + 0.05 * rng.standard_normal((256, 1))).astype(np.float32)
x, y = em.tensor(x_np, device=ad), em.tensor(y_np, device=ad)

w = em.zeros(1, 1, device=ad).require_grad()
b = em.zeros(1, device=ad).require_grad()
lr = 0.5
for step in range(1, 101):
    loss = ((x @ w + b - y) ** 2).mean()
    grads = loss.backward()
    # The update runs on the untracked device; the results become fresh leaves.
    w = (w.to_device(cpu) - lr * w.grad(grads)).to_device(ad).require_grad()
    b = (b.to_device(cpu) - lr * b.grad(grads)).to_device(ad).require_grad()
    if step in (1, 2, 5, 10, 20, 50, 100):
        print(f"step {step:3d}  loss {loss.item():.5f}")

print(f"w = {w.item():.3f} (true 3), b = {b.item():.3f} (true -2)")
