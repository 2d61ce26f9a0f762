"""bench/gpu_telemetry.py without a GPU: its parsing and summaries against hand-written
samples, and the background sampler against a stand-in ``nvidia-smi`` (a script that checks
its arguments and prints samples with the current time, as the real one does under -lms)."""
from __future__ import annotations

import datetime
import math
import os
import stat
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import gpu_telemetry as T  # noqa: E402


def _stamp(t: float) -> str:
    return datetime.datetime.fromtimestamp(t).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]


def test_parse_line_reads_a_sample_and_refuses_other_lines():
    t = time.time()
    s = T.parse_line(f"{_stamp(t)}, 1410, 698.72, 700.00, 0x0000000000000004")
    assert s is not None and abs(s.t - t) < 0.002
    assert (s.sm_mhz, s.watts, s.limit_w, s.reasons) == (1410.0, 698.72, 700.0, 4)
    na = T.parse_line(f"{_stamp(t)}, 1980, [N/A], [Not Supported], 0x0000000000000000")
    assert math.isnan(na.watts) and math.isnan(na.limit_w) and na.reasons == 0
    for line in ("timestamp, clocks.sm [MHz], power.draw [W], power.limit [W], x",
                 "No devices were found", "", f"{_stamp(t)}, 1980, 100, 700"):
        assert T.parse_line(line) is None, line


def test_summary_and_its_note():
    S = T.Sample
    samples = [S(0, 1980, 310.0, 700.0, 0), S(1, 1410, 703.5, 700.0, 0x4),
               S(2, 1650, 699.0, 700.0, 0x4 | 0x20), S(3, 1965, 650.0, 700.0, 0)]
    s = T.summarize(samples)
    assert s == {"samples": 4, "sm_mhz": [1410, 1980], "peak_w": 703.5, "limit_w": 700.0,
                 "slowdowns": {"power cap": 0.5, "thermal (software)": 0.25}}
    assert T.describe(s) == ("GPU while timed (4 samples): SM clock 1410-1980 MHz; power up "
                             "to 704 W of 700 W; power cap in 50% of samples, thermal "
                             "(software) in 25% of samples")
    calm = T.summarize([S(0, 1980, 120.0, float("nan"), 0)])
    assert T.describe(calm) == ("GPU while timed (1 sample): SM clock 1980 MHz; power up to "
                                "120 W; no slowdown")
    assert T.summarize([]) is None


_FAKE = r'''#!{python}
import datetime, sys, time
args = sys.argv[1:]
want = {{"--id=0", "--query-gpu={query}", "--format=csv,noheader,nounits", "-lms=50"}}
if set(args) != want:
    print("bad arguments:", args)
    sys.exit(2)
for i in range(1000):
    t = datetime.datetime.now().strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
    print(f"{{t}}, {{1980 - 10 * (i % 3)}}, {{600 + i % 2}}.5, 700.00, 0x{{4 * (i % 2):016x}}")
    time.sleep(0.05)
'''


def _fake(tmp_path) -> str:
    exe = tmp_path / "nvidia-smi"
    exe.write_text(_FAKE.format(python=sys.executable, query=T.QUERY))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return str(exe)


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="no pseudo-terminals on this platform")
def test_sampler_collects_a_rows_window_from_a_running_nvidia_smi(tmp_path):
    tel = T.Telemetry(0, period_ms=50, exe=_fake(tmp_path))
    try:
        assert tel.why is None
        time.sleep(0.3)
        t0 = time.time()
        time.sleep(0.6)
        t1 = time.time()
        s = tel.window(t0, t1)
        # (12 at the stand-in's 50 ms; at least 3 on a loaded machine)
        assert s is not None and 3 <= s["samples"] <= 16, s
        assert s["sm_mhz"][0] >= 1960 and s["sm_mhz"][1] <= 1980
        assert s["peak_w"] in (600.5, 601.5) and s["limit_w"] == 700.0
        assert 0.2 <= s["slowdowns"]["power cap"] <= 0.8
    finally:
        tel.close()
    assert tel._proc.poll() is not None            # the sampler is stopped


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="no pseudo-terminals on this platform")
def test_a_sampler_refusing_its_arguments_gives_no_samples(tmp_path):
    exe = tmp_path / "nvidia-smi"
    exe.write_text(f"#!{sys.executable}\nimport sys\nprint('bad'); sys.exit(2)\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    tel = T.Telemetry(0, exe=str(exe))
    try:
        assert tel.window(time.time() - 1, time.time()) is None
    finally:
        tel.close()


def test_without_nvidia_smi_there_is_a_reason_and_no_window(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    tel = T.Telemetry()
    assert tel.why == "nvidia-smi not found"
    assert tel.window(0.0, time.time()) is None
    tel.close()
