"""Entry point of the `ember` console script: subcommands parsed with argparse."""
from __future__ import annotations

import argparse
import sys


def _parser() -> argparse.ArgumentParser:
    from .. import __version__
    p = argparse.ArgumentParser(
        prog="ember", description="ember: tensors on interchangeable backends, with autodiff "
                                  "as a decorator.")
    p.add_argument("--version", action="version", version=f"ember {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    info = sub.add_parser("info", help="backends usable here (and why others are not), "
                                       "versions, CPU")
    info.add_argument("--json", action="store_true", help="print the report as JSON")

    demo = sub.add_parser("demo", help="train a small MLP on the bundled 8x8 digits")
    demo.add_argument("--epochs", type=int, default=20, help="passes over the training set "
                                                            "(default 20)")
    demo.add_argument("--batch-size", type=int, default=32, help="samples per step (default 32)")
    demo.add_argument("--lr", type=float, default=0.1, help="SGD learning rate (default 0.1)")
    demo.add_argument("--hidden", type=int, default=64, help="hidden units (default 64)")
    demo.add_argument("--seed", type=int, default=0, help="seed of the split, the "
                                                         "initialization and the shuffling")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand; returns the process exit status."""
    try:
        return _run(argv)
    except BrokenPipeError:  # `ember info | head`: the reader left; not an error
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _run(argv):
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "info":
        from .info import run_info
        return run_info(as_json=args.json)
    if args.command == "demo":
        from .demo import run_demo
        for name in ("epochs", "batch_size", "hidden"):
            if getattr(args, name) < 1:
                parser.error(f"demo: --{name.replace('_', '-')} must be >= 1")
        if not args.lr > 0:
            parser.error("demo: --lr must be > 0")
        run_demo(epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
                 hidden=args.hidden, seed=args.seed)
        return 0
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
