"""Fit y = 3x - 2 (plus noise) with autodiff and hand-written SGD: the smallest complete
training loop in ember.

    python examples/linear_regression.py
    python examples/linear_regression.py --device cuda      # on a GPU
"""
import argparse

import numpy as np

import ember as em


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ... (default cpu)")
    args = p.parse_args(argv)
    try:
        device = em.device(args.device)
    except em.errors.EmberError as e:      # no such device, or not usable here: say why
        p.exit(2, f"{p.prog}: error: --device {args.device}: {e}\n")
    ad = device.autodiff()

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
        w = (w.to_device(device) - lr * w.grad(grads)).to_device(ad).require_grad()
        b = (b.to_device(device) - lr * b.grad(grads)).to_device(ad).require_grad()
        if step in (1, 2, 5, 10, 20, 50, 100):
            print(f"step {step:3d}  loss {loss.item():.5f}")

    print(f"w = {w.item():.3f} (true 3), b = {b.item():.3f} (true -2)")
    return {"w": w.item(), "b": b.item(), "device": str(device)}


if __name__ == "__main__":
    main()
