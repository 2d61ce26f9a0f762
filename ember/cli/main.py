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

    demo = sub.add_parser(
        "demo", help="train a small CNN on the bundled 8x8 digits with the Learner",
        description="Train a small CNN on the bundled 8x8 digits with ember.train.Learner "
                    "(a dashboard when stdout is a terminal: left/right switch the metric, q "
                    "stops with a checkpoint saved), then classify a few held-out digits.")
    demo.add_argument("--epochs", type=int, default=8, help="passes over the training set "
                                                           "(default 8)")
    demo.add_argument("--batch-size", type=int, default=32, help="samples per step (default 32)")
    demo.add_argument("--lr", type=float, default=0.01, help="peak learning rate of Adam's "
                                                            "cosine schedule (default 0.01)")
    demo.add_argument("--channels", type=int, default=16, help="channels of the first "
                                                              "convolution (default 16)")
    demo.add_argument("--seed", type=int, default=0, help="seed of the split, the "
                                                         "initialization and the shuffling")
    demo.add_argument("--plain", action="store_true", help="one line per epoch instead of "
                                                          "the dashboard")
    demo.add_argument("--artifact-dir", default=None, metavar="DIR",
                      help="checkpoints, metric logs and the summary (default: "
                           "ember-demo-<user> in the temporary directory)")
    demo.add_argument("--resume", action="store_true", help="continue from the latest "
                                                           "checkpoint in the artifact dir")
    demo.add_argument("--samples", type=int, default=8, help="held-out digits to classify at "
                                                            "the end (default 8)")
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
        from .demo import default_artifact_dir, run_demo
        for name in ("epochs", "batch_size", "channels"):
            if getattr(args, name) < 1:
                parser.error(f"demo: --{name.replace('_', '-')} must be >= 1")
        if not args.lr > 0:
            parser.error("demo: --lr must be > 0")
        if args.samples < 0:
            parser.error("demo: --samples must be >= 0")
        try:
            return run_demo(epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
                            channels=args.channels, seed=args.seed, plain=args.plain,
                            artifact_dir=args.artifact_dir or default_artifact_dir(),
                            resume=args.resume, samples=args.samples)
        except KeyboardInterrupt:       # a second Ctrl-C: abort at once
            print("\ninterrupted", file=sys.stderr)
            return 130
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
