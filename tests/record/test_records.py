"""ember's own records: save/load round trips in both formats and precisions, record
contents read back with the independent `safetensors` and `msgpack` packages, strict and
non-strict loading, corrupt files, and atomic writes."""
import json
import os
import struct

import ml_dtypes
import numpy as np
import pytest

import ember as em
from ember import record
from ember.errors import RecordError

from .models import Linear, Mixed, P

FORMATS = ["safetensors", "msgpack"]


def _params(m):
    return dict(m.named_parameters())


def _tmp_files(d):
    return [f for f in os.listdir(d) if f.endswith(".tmp")]


# -- round trips ----------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", FORMATS)
def test_full_precision_round_trip_is_exact(tmp_path, fmt):
    src = Mixed(seed=1)
    path = tmp_path / f"m.{fmt}"
    record.save_module(src, path, format=fmt)
    fresh = Mixed(seed=2)                       # other values, other ids
    out = record.load_module_record(fresh, path)
    assert out is not fresh
    a, b, f = _params(src), _params(out), _params(fresh)
    assert list(a) == list(b)
    for k in a:
        assert b[k].dtype is a[k].dtype, k
        assert b[k].id == a[k].id, k            # ids come from the record
        assert b[k].require_grad_flag == f[k].require_grad_flag
        b[k].to_data().assert_eq(a[k].to_data())
    assert f["w32"].id != a["w32"].id           # the target module is unchanged
    assert not np.array_equal(f["w32"].numpy(), a["w32"].numpy())
    assert out.name == "mixed"


@pytest.mark.parametrize("fmt", FORMATS)
def test_half_precision_round_trip(tmp_path, fmt):
    src = Mixed(seed=1)
    path = tmp_path / "m.rec"
    record.save_module(src, path, format=fmt, precision="half")
    out = record.load_module_record(Mixed(seed=2), path)
    a, b = _params(src), _params(out)
    for k in a:
        assert b[k].dtype is a[k].dtype, k      # back in the module's dtypes
        ref = a[k].numpy()
        if a[k].dtype in (em.f32, em.f64):       # through f16: exactly the f16 rounding
            np.testing.assert_array_equal(b[k].numpy(),
                                          ref.astype(np.float16).astype(ref.dtype))
            assert np.abs(b[k].numpy() - ref).max() <= 1e-3 * np.abs(ref).max()
        else:                                    # f16, bf16, int, bool: kept as they are
            b[k].to_data().assert_eq(a[k].to_data())


def test_half_record_is_smaller_and_holds_f16(tmp_path):
    m = Mixed()
    record.save_module(m, tmp_path / "full.safetensors")
    record.save_module(m, tmp_path / "half.safetensors", precision="half")
    from safetensors import safe_open
    with safe_open(str(tmp_path / "half.safetensors"), "np") as f:
        assert f.get_slice("w32").get_dtype() == "F16"
        assert f.get_slice("w64").get_dtype() == "F16"
        assert f.get_slice("wbf").get_dtype() == "BF16"
        assert f.get_slice("steps").get_dtype() == "I64"
        meta = f.metadata()
    assert meta["precision"] == "half"
    assert json.loads(meta["dtypes"])["w64"] == "f64"
    assert os.path.getsize(tmp_path / "half.safetensors") < \
        os.path.getsize(tmp_path / "full.safetensors")


def test_half_precision_overflow_warns(tmp_path):
    class Big(em.Module):
        def __init__(self):
            self.w = P(np.array([1.0, 1e6], np.float32), em.device("cpu"))

    with pytest.warns(RuntimeWarning, match="w"):
        record.save_module(Big(), tmp_path / "b.safetensors", precision="half")


def test_module_save_and_load_record_methods(tmp_path):
    m = Mixed(seed=3)
    m.save(tmp_path / "m.mpk", format="msgpack")
    out = Mixed(seed=4).load_record(tmp_path / "m.mpk")
    np.testing.assert_array_equal(out.blocks[1].weight.numpy(), m.blocks[1].weight.numpy())
    x = em.Tensor.random((2, 4))
    em.assert_approx_eq(out(x), m(x), 0.0)


def test_loads_onto_an_autodiff_device_as_leaves(tmp_path):
    m = Mixed(seed=1)
    record.save_module(m, tmp_path / "m.safetensors")
    ad = em.device("cpu").autodiff()
    out = record.load_module_record(Mixed(device=ad, seed=2), tmp_path / "m.safetensors")
    p = _params(out)
    assert p["w32"].device is ad and p["w32"].is_require_grad()
    assert not p["steps"].is_require_grad()
    loss = (out(em.ones(1, 4, device=ad)) ** 2).sum()
    grads = em.GradientsParams.from_grads(loss.backward(), out)
    assert out.blocks[0].weight in grads
    record.save_module(out, tmp_path / "again.safetensors")     # saving from autodiff too
    back = record.load_module_record(Mixed(seed=3), tmp_path / "again.safetensors")
    back.w32.to_data().assert_eq(m.w32.to_data())


def test_frozen_flags_are_the_target_modules(tmp_path):
    m = Mixed(seed=1)
    record.save_module(m, tmp_path / "m.safetensors")
    out = record.load_module_record(Mixed().freeze("blocks.*"), tmp_path / "m.safetensors")
    assert not out.blocks[0].weight.require_grad_flag
    assert out.w32.require_grad_flag


def test_record_contents_read_by_the_safetensors_package(tmp_path):
    m = Mixed(seed=5)
    path = tmp_path / "m.safetensors"
    record.save_module(m, path)
    from safetensors import safe_open
    with safe_open(str(path), "np") as f:
        assert set(f.keys()) == {k for k, _ in m.named_parameters()}
        for k, prm in m.named_parameters():
            np.testing.assert_array_equal(f.get_tensor(k), prm.numpy())
            assert f.get_tensor(k).dtype == prm.dtype.np
        meta = f.metadata()
    assert meta["format"] == "ember" and meta["format_version"] == "1"
    assert meta["ember_version"] == em.__version__
    assert json.loads(meta["param_ids"]) == {k: p.id for k, p in m.named_parameters()}


def test_msgpack_contents_read_by_the_msgpack_package(tmp_path):
    import msgpack
    m = Mixed(seed=5)
    path = tmp_path / "m.mpk"
    record.save_module(m, path, format="msgpack")
    doc = msgpack.unpackb(path.read_bytes(), raw=False)
    assert doc["format"] == "ember-record" and doc["format_version"] == 1
    assert doc["metadata"]["ember_version"] == em.__version__
    ents = {e["name"]: e for e in doc["tensors"]}
    assert list(ents) == [k for k, _ in m.named_parameters()]
    e = ents["wbf"]
    assert e["dtype"] == "bf16" and e["shape"] == [2, 3]
    np.testing.assert_array_equal(
        np.frombuffer(e["data"], ml_dtypes.bfloat16).reshape(2, 3), m.wbf.numpy())


def test_loads_a_safetensors_file_written_by_the_safetensors_package(tmp_path):
    from safetensors.numpy import save_file
    m = Mixed()
    vals = {k: np.full(p.shape, 0.5, p.dtype.np) if p.dtype.is_float else p.numpy()
            for k, p in m.named_parameters()}
    save_file(vals, str(tmp_path / "x.safetensors"))
    out = record.load_module_record(m, tmp_path / "x.safetensors")
    np.testing.assert_array_equal(out.blocks[0].bias.numpy(), np.full(4, 0.5, np.float32))
    assert out.w32.id == m.w32.id            # no ids in the file: the module's are kept


def test_save_record_and_load_record_with_metadata(tmp_path):
    for fmt in FORMATS:
        path = tmp_path / f"s.{fmt}"
        record.save_record({"m": em.ones(2, 2), "step": np.array(3)}, path, format=fmt,
                           metadata={"epoch": 4, "lr": [0.1, 0.01]})
        r = record.load_record(path)
        assert r.format == fmt and r.metadata == {"epoch": 4, "lr": [0.1, 0.01]}
        np.testing.assert_array_equal(r.tensors["m"], np.ones((2, 2), np.float32))
        assert r.tensors["step"].dtype == np.int64


def test_unknown_format_and_precision(tmp_path):
    with pytest.raises(RecordError, match="unknown record format 'hdf5'.*safetensors"):
        record.save_module(Mixed(), tmp_path / "x", format="hdf5")
    with pytest.raises(RecordError, match="precision 'quarter'"):
        record.save_module(Mixed(), tmp_path / "x", precision="quarter")
    assert os.listdir(tmp_path) == []


# -- strict and non-strict loading ----------------------------------------------------------

class Three(em.Module):
    def __init__(self, shapes=((2, 3), (4,), (5,))):
        dev = em.device("cpu")
        self.a = P(np.zeros(shapes[0], np.float32), dev)
        self.b = P(np.zeros(shapes[1], np.float32), dev)
        self.c = P(np.zeros(shapes[2], np.float32), dev)


def _write(path, arrays):
    record.save_record(arrays, path)


def test_strict_lists_every_problem_in_one_error(tmp_path):
    path = tmp_path / "r.safetensors"
    _write(path, {"a": np.ones((3, 2), np.float32), "c": np.ones(5, np.float32),
                  "d": np.ones(1, np.float32), "e.f": np.ones(1, np.float32)})
    m = Three()
    with pytest.raises(RecordError) as ei:
        record.load_module_record(m, path)
    msg = str(ei.value)
    assert str(path) in msg
    assert "1 missing" in msg and "  b" in msg
    assert "2 unexpected" in msg and "  d" in msg and "  e.f" in msg
    assert "1 mismatched" in msg and "a: shape [3, 2] in the record, [2, 3] in the module" in msg
    assert "strict=False" in msg
    assert not m.c.numpy().any()                # nothing was loaded


def test_non_strict_returns_module_and_report(tmp_path):
    path = tmp_path / "r.safetensors"
    _write(path, {"a": np.ones((3, 2), np.float32), "c": np.full(5, 2.0, np.float32),
                  "d": np.ones(1, np.float32)})
    out, rep = record.load_module_record(Three(), path, strict=False)
    assert isinstance(rep, record.LoadReport) and not rep.ok
    assert rep.loaded == ["c"] and rep.missing == ["b"] and rep.unexpected == ["d"]
    assert [k for k, _ in rep.mismatched] == ["a"]
    np.testing.assert_array_equal(out.c.numpy(), np.full(5, 2.0, np.float32))
    np.testing.assert_array_equal(out.a.numpy(), np.zeros((2, 3), np.float32))  # kept
    assert "1 loaded" in str(rep) and "missing" in str(rep)
    out2, rep2 = record.load_module_record(Three(), path.parent / "r.safetensors",
                                           strict=False)
    assert rep2.loaded == rep.loaded


def test_complete_non_strict_report_is_ok(tmp_path):
    record.save_module(Mixed(), tmp_path / "m.safetensors")
    out, rep = record.load_module_record(Mixed(), tmp_path / "m.safetensors", strict=False)
    assert rep.ok and len(rep.loaded) == len(Mixed().named_parameters())


def test_kind_mismatch_and_int_range(tmp_path):
    class Kinds(em.Module):
        def __init__(self):
            dev = em.device("cpu")
            self.f = P(np.zeros(2, np.float32), dev)
            self.i = P(np.zeros(2, np.int8), dev, require_grad=False)
            self.j = P(np.zeros(2, np.int32), dev, require_grad=False)

    path = tmp_path / "k.safetensors"
    _write(path, {"f": np.array([1, 2], np.int64), "i": np.array([1, 300], np.int64),
                  "j": np.array([5, -6], np.int64)})
    with pytest.raises(RecordError) as ei:
        record.load_module_record(Kinds(), path)
    msg = str(ei.value)
    assert "f: record holds int values (int64), the param is f32" in msg
    assert "i: int values in [1, 300] do not fit the param's i8" in msg
    out, rep = record.load_module_record(Kinds(), path, strict=False)
    assert rep.loaded == ["j"] and out.j.dtype is em.i32
    np.testing.assert_array_equal(out.j.numpy(), [5, -6])


def test_full_record_casts_into_other_float_dtypes(tmp_path):
    class F(em.Module):
        def __init__(self, dtype):
            self.w = P(np.zeros(3), em.device("cpu"), dtype=dtype)

    record.save_module(F(em.f64).map(lambda _, p: p.tensor + 1.5), tmp_path / "f.safetensors")
    out = record.load_module_record(F(em.bf16), tmp_path / "f.safetensors")
    assert out.w.dtype is em.bf16
    np.testing.assert_array_equal(out.w.numpy().astype(np.float32), [1.5] * 3)


# -- corrupt and foreign files --------------------------------------------------------------

def _good_bytes(tmp_path, fmt):
    p = tmp_path / f"good.{fmt}"
    record.save_module(Mixed(), p, format=fmt)
    return p.read_bytes()


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("cut", [0, 5, 12, -7, -1])
def test_truncated_records_raise_naming_the_file(tmp_path, fmt, cut):
    raw = _good_bytes(tmp_path, fmt)
    bad = tmp_path / f"bad.{fmt}"
    bad.write_bytes(raw[:cut] if cut > 0 else raw[:len(raw) + cut] if cut else b"")
    with pytest.raises(RecordError, match=str(bad).replace(".", r"\.")):
        record.load_module_record(Mixed(), bad)


def test_corrupt_safetensors_headers(tmp_path):
    raw = _good_bytes(tmp_path, "safetensors")
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    cases = {
        "json": raw[:8] + b"{" + b"x" * (n - 1) + raw[8 + n:],
        "offsets": None, "dtype": None, "length": struct.pack("<Q", 2 ** 40) + raw[8:],
    }
    h = dict(header)
    h["w32"] = dict(h["w32"], data_offsets=[0, 7])
    cases["offsets"] = h
    h = dict(header)
    h["w32"] = dict(h["w32"], dtype="C64")
    cases["dtype"] = h
    for name, val in cases.items():
        if isinstance(val, dict):
            body = json.dumps(val).encode()
            body += b" " * (-len(body) % 8)
            val = struct.pack("<Q", len(body)) + body + raw[8 + n:]
        p = tmp_path / f"{name}.safetensors"
        p.write_bytes(val)
        with pytest.raises(RecordError, match=str(p).replace(".", r"\.")):
            record.load_module_record(Mixed(), p)


def test_corrupt_msgpack_record(tmp_path):
    import msgpack
    raw = _good_bytes(tmp_path, "msgpack")
    doc = msgpack.unpackb(raw)
    doc["tensors"][0]["data"] = doc["tensors"][0]["data"][:-1]
    p = tmp_path / "short.mpk"
    p.write_bytes(msgpack.packb(doc))
    with pytest.raises(RecordError, match="needs 48 bytes, has 47"):
        record.load_record(p)
    p.write_bytes(msgpack.packb({"hello": 1}))
    with pytest.raises(RecordError, match="not an ember msgpack record"):
        record.load_record(p)


def test_foreign_files(tmp_path):
    p = tmp_path / "x.bin"
    p.write_bytes(b"hello world, not a record")
    with pytest.raises(RecordError, match="not an ember record"):
        record.load_record(p)
    p.write_bytes(b"PK\x03\x04" + b"\0" * 30)
    with pytest.raises(RecordError, match="import_pytorch"):
        record.load_record(p)
    with pytest.raises(RecordError, match="cannot open"):
        record.load_record(tmp_path / "missing.safetensors")


def test_newer_format_version_is_refused(tmp_path):
    from ember.record import safetensors_format
    safetensors_format.write_safetensors(tmp_path / "n.safetensors", {"a": np.ones(2)},
                                         {"format": "ember", "format_version": "99",
                                          "ember_version": "9.0"})
    with pytest.raises(RecordError, match="format version 99.*newer"):
        record.load_record(tmp_path / "n.safetensors")


# -- atomic writes --------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", FORMATS)
def test_failed_save_leaves_old_file_and_no_temp_files(tmp_path, fmt, monkeypatch):
    path = tmp_path / "m.rec"
    record.save_module(Mixed(seed=1), path, format=fmt)
    before = path.read_bytes()

    from ember.record import atomic
    real = atomic.os.replace

    def boom(*a, **k):
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(atomic.os, "replace", boom)
    with pytest.raises(OSError, match="simulated"):
        record.save_module(Mixed(seed=2), path, format=fmt)
    monkeypatch.setattr(atomic.os, "replace", real)
    assert path.read_bytes() == before
    assert _tmp_files(tmp_path) == []
    assert os.listdir(tmp_path) == ["m.rec"]


def test_failure_while_writing_tensors_keeps_old_file(tmp_path, monkeypatch):
    path = tmp_path / "m.safetensors"
    record.save_module(Mixed(seed=1), path)
    before = path.read_bytes()
    from ember.record import safetensors_format
    calls = []
    real = safetensors_format._le_bytes

    def fail_third(arr):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt   # even a BaseException cleans up
        return real(arr)

    monkeypatch.setattr(safetensors_format, "_le_bytes", fail_third)
    with pytest.raises(KeyboardInterrupt):
        record.save_module(Mixed(seed=2), path)
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["m.safetensors"]


def test_atomic_write_helpers(tmp_path):
    p = tmp_path / "f.txt"
    record.write_text_atomic(p, "one")
    os.chmod(p, 0o640)
    with pytest.raises(ValueError):
        with record.atomic_write(p, "w") as f:
            f.write("two")
            raise ValueError("stop")
    assert p.read_text() == "one" and os.listdir(tmp_path) == ["f.txt"]
    record.write_bytes_atomic(p, b"three")
    assert p.read_bytes() == b"three"
    assert os.stat(p).st_mode & 0o777 == 0o640          # permissions kept
    q = tmp_path / "new.bin"
    record.write_bytes_atomic(q, b"x")
    assert os.stat(q).st_mode & 0o777 == 0o666 & ~_umask()
    assert sorted(os.listdir(tmp_path)) == ["f.txt", "new.bin"]


def _umask():
    old = os.umask(0)
    os.umask(old)
    return old


def test_linear_helper_module_round_trip(tmp_path):
    lin = Linear(3, 2, device=em.device("cpu"), rng=np.random.default_rng(0))
    record.save_module(lin, tmp_path / "l.safetensors")
    out = record.load_module_record(
        Linear(3, 2, device=em.device("cpu"), rng=np.random.default_rng(1)),
        tmp_path / "l.safetensors")
    x = em.Tensor.random((4, 3))
    em.assert_approx_eq(out(x), lin(x), 0.0)
