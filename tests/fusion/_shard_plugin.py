"""Run a 1/N shard of the collected tests: ``-p tests.fusion._shard_plugin`` with
EMBER_TEST_SHARD=k/N (a development aid for slow machines)."""
import os


def pytest_collection_modifyitems(config, items):
    spec = os.environ.get("EMBER_TEST_SHARD")
    if not spec:
        return
    k, n = (int(v) for v in spec.split("/"))
    keep = [it for i, it in enumerate(items) if i % n == k]
    drop = [it for i, it in enumerate(items) if i % n != k]
    if drop:
        config.hook.pytest_deselected(items=drop)
    items[:] = keep


def pytest_runtest_logreport(report):
    if report.failed and os.environ.get("EMBER_TEST_SHARD"):
        import sys
        text = str(report.longrepr)
        lines = text.splitlines()
        sys.stderr.write(f"\nFAILED {report.nodeid}\n" + "\n".join(lines[-12:]) + "\n")
        sys.stderr.flush()
